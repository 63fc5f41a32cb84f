"""What the kubelet's launcher imports: an archive whose images the node holds with the same content is skipped."""

from liqo.localclusters.realnodes.enter import held_images, is_held

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
LISTING = f"""\
REF                       TYPE       DIGEST       SIZE      PLATFORMS   LABELS
localhost/liqo/liqo:0.1.0 {MANIFEST} sha256:new   122.9 MiB linux/amd64 io.cri-containerd.image=managed
localhost/liqo/pause:1    {MANIFEST} sha256:pause 1.4 MiB   linux/amd64 io.cri-containerd.pinned=pinned
sha256:55211c56faa869     {MANIFEST} sha256:new   122.9 MiB linux/amd64 io.cri-containerd.image=managed
"""


def test_held_images_are_read_from_ctrs_listing() -> None:
    assert held_images(LISTING) == {
        "localhost/liqo/liqo:0.1.0": "sha256:new",
        "localhost/liqo/pause:1": "sha256:pause",
        "sha256:55211c56faa869": "sha256:new",
    }
    assert held_images("REF TYPE DIGEST SIZE PLATFORMS LABELS\n") == {}


def test_an_archive_is_held_when_every_name_is_there_with_its_content() -> None:
    held = held_images(LISTING)
    assert is_held({"localhost/liqo/pause:1": "sha256:pause"}, held)
    assert is_held({"localhost/liqo/liqo:0.1.0": "sha256:new", "localhost/liqo/pause:1": "sha256:pause"}, held)


def test_the_same_name_with_other_content_is_imported_again() -> None:
    # liqo's image keeps its name across code changes; a node keeps its images across a cluster's restart.
    assert not is_held({"localhost/liqo/liqo:0.1.0": "sha256:old"}, held_images(LISTING))


def test_a_missing_name_is_imported() -> None:
    held = held_images(LISTING)
    assert not is_held({"localhost/liqo/toolbox:1": "sha256:t"}, held)
    assert not is_held({"localhost/liqo/pause:1": "sha256:pause", "localhost/liqo/toolbox:1": ""}, held)


def test_a_docker_archive_without_digests_is_held_by_its_names() -> None:
    assert is_held({"localhost/liqo/pause:1": ""}, held_images(LISTING))


def test_an_archive_naming_nothing_is_imported() -> None:
    assert not is_held({}, held_images(LISTING))
