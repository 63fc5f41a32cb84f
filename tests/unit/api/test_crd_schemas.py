"""Structural checks of the CRDs: what the API server would refuse, or serve wrongly, caught without one."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from liqo.api import names
from liqo.api.crds import all_crds
from liqo.api.crds.schema import (
    AMOUNT_PATTERN,
    CLUSTER_ID_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    NAME_OR_PREFIX_PATTERN,
    QUANTITY_PATTERN,
    crd_name,
)
from liqo.api.resources import ALL, FOREIGN_CLUSTERS, VIRTUAL_NODES
from liqo.kube import printable
from liqo.kube.resources import Resource

Schema = dict[str, Any]

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
SHORT_NAMES = {
    "ForeignCluster": "fc",
    "ResourceRequest": "rr",
    "ResourceOffer": "ro",
    "SharingPolicy": "sp",
    "VirtualNode": "vn",
    "ShadowPod": "shp",
    "NamespaceOffloading": "nsof",
    "NamespaceMap": "nm",
    "NetworkConfig": "netcfg",
    "DiscoverySource": "dsrc",  # "ds" is DaemonSet's
    "WorkingMode": "wm",
}
# `.field`, optionally followed by a filter on a list item: `[?(@.key=="value")]`.
SEGMENT = re.compile(r'\.(?P<field>[\w-]+)(?:\[\?\(@\.(?P<key>\w+)=="(?P<value>[^"]+)"\)\]|\[(?P<index>\d+)\])?')
# A label of the object, its key's dots escaped: `metadata` is the API server's schema, not ours.
LABEL = re.compile(r"\.metadata\.labels\.(?:[\w/-]|\\\.)+")


def version(crd: dict[str, Any]) -> Schema:
    versions: list[Schema] = crd["spec"]["versions"]
    assert len(versions) == 1
    return versions[0]


def root(crd: dict[str, Any]) -> Schema:
    schema: Schema = version(crd)["schema"]["openAPIV3Schema"]
    return schema


def walk(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every schema node below ``schema`` with its path (``[]`` for list items, ``{}`` for map values)."""
    for name, child in (schema.get("properties") or {}).items():
        yield f"{path}.{name}", child
        yield from walk(child, f"{path}.{name}")
    for suffix, key in (("[]", "items"), ("{}", "additionalProperties")):
        if isinstance(schema.get(key), dict):
            yield f"{path}{suffix}", schema[key]
            yield from walk(schema[key], f"{path}{suffix}")


def resolve(schema: Schema, json_path: str) -> Schema:
    """The schema node a printer column's JSONPath reads; fails if the path leaves the schema."""
    if LABEL.fullmatch(json_path):
        return {"type": "string"}
    segments = list(SEGMENT.finditer(json_path))
    assert "".join(m.group(0) for m in segments) == json_path, f"unsupported JSONPath {json_path}"
    node = schema
    for segment in segments:
        properties = node.get("properties") or {}
        if segment["field"] in properties:
            node = properties[segment["field"]]
        else:
            assert isinstance(node.get("additionalProperties"), dict), f"{json_path}: no field {segment['field']}"
            node = node["additionalProperties"]
        if segment["index"]:
            assert node["type"] == "array", f"{json_path}: index of a non-list"
            node = node["items"]
        if segment["key"]:
            assert node["type"] == "array", f"{json_path}: filter on a non-list"
            node = node["items"]
            key = node["properties"][segment["key"]]
            assert segment["value"] in key.get("enum", [segment["value"]]), f"{json_path}: no such {segment['key']}"
    return node


def test_one_crd_per_descriptor_with_matching_names() -> None:
    assert [crd["spec"]["names"]["kind"] for crd in all_crds()] == [r.kind for r in ALL]
    for crd, resource in zip(all_crds(), ALL, strict=True):
        spec = crd["spec"]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["metadata"]["name"] == crd_name(resource) == f"{resource.plural}.{resource.group}"
        assert spec["group"] == resource.group
        assert spec["names"]["plural"] == resource.plural
        assert spec["names"]["listKind"] == f"{resource.kind}List"
        assert spec["scope"] == ("Namespaced" if resource.namespaced else "Cluster")
        assert version(crd)["name"] == resource.version
        assert version(crd)["served"]
        assert version(crd)["storage"]


def test_labels_categories_short_names_and_status_subresource() -> None:
    for kind, crd in CRDS.items():
        assert crd["metadata"]["labels"] == {names.MANAGED_BY: names.MANAGED_BY_VALUE}
        assert crd["spec"]["names"]["categories"] == ["liqo"]
        assert crd["spec"]["names"]["shortNames"] == [SHORT_NAMES[kind]]
        assert version(crd)["subresources"] == {"status": {}}


def test_every_node_is_structural_and_every_field_described() -> None:
    for kind, crd in CRDS.items():
        schema = root(crd)
        assert schema["type"] == "object"
        assert "spec" in schema["required"]
        for path, node in walk(schema):
            where = f"{kind}{path}"
            if node.get("x-kubernetes-int-or-string"):
                assert "type" not in node, where
                assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], where
                assert node["pattern"] in (QUANTITY_PATTERN, AMOUNT_PATTERN), where
            else:
                assert node.get("type") in {"object", "array", "string", "integer", "boolean", "number"}, where
            if node.get("type") == "array":
                assert isinstance(node.get("items"), dict), where
            if path != ".metadata" and not path.endswith("{}"):
                assert node.get("description"), f"{where} has no description"
            if "default" in node and "enum" in node:
                assert node["default"] in node["enum"], where


def test_printer_columns_read_existing_fields() -> None:
    for kind, crd in CRDS.items():
        columns = version(crd)["additionalPrinterColumns"]
        assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}, kind
        for column in columns[:-1]:
            node = resolve(root(crd), column["jsonPath"])
            if column["type"] == "integer":
                assert node["type"] == "integer", (kind, column)
        assert len({c["name"] for c in columns}) == len(columns), kind


def test_conditions_merge_by_type() -> None:
    for kind in ("ForeignCluster", "VirtualNode"):
        conditions = root(CRDS[kind])["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert set(conditions["items"]["required"]) == {"type", "status"}


@pytest.mark.parametrize("resource", [FOREIGN_CLUSTERS, VIRTUAL_NODES], ids=lambda r: r.kind)
def test_cluster_id_is_immutable(resource: Resource) -> None:
    spec = root(CRDS[resource.kind])["properties"]["spec"]
    assert "clusterID" in spec["required"]
    rules = spec["properties"]["clusterID"]["x-kubernetes-validations"]
    assert rules == [{"rule": "self == oldSelf", "message": "clusterID is immutable"}]


@pytest.mark.parametrize(
    ("kind", "json_path"),
    [
        ("ForeignCluster", ".spec.clusterName"),
        ("ResourceRequest", ".spec.consumerClusterName"),
        ("ResourceOffer", ".spec.providerClusterName"),
        ("ResourceOffer", ".status.reason"),
    ],
)
def test_a_name_or_reason_a_peer_writes_is_printable_and_bounded(kind: str, json_path: str) -> None:
    """Shown by kubectl's columns and in logs: no control, format or separator character, a bounded length."""
    field = resolve(root(CRDS[kind]), json_path)
    assert field["pattern"] == printable.PATTERN
    assert field["maxLength"] <= 1024


def test_the_virtual_node_an_offer_names_is_a_name() -> None:
    field = resolve(root(CRDS["ResourceOffer"]), ".status.virtualNode")
    assert (field["pattern"], field["maxLength"]) == (DNS_SUBDOMAIN_PATTERN, 253)


def test_sharing_policy_bounds_and_defaults() -> None:
    spec = root(CRDS["SharingPolicy"])["properties"]["spec"]
    assert spec["required"] == ["action"]
    assert spec["properties"]["action"]["enum"] == ["Share", "Deny"]
    assert (spec["properties"]["percentage"]["minimum"], spec["properties"]["percentage"]["maximum"]) == (1, 100)
    assert spec["properties"]["refreshThresholdPercent"]["default"] == 10
    assert spec["properties"]["offerTTLSeconds"]["default"] == 300
    assert "default" not in spec["properties"]["allowedTwinNames"]  # none: the provider names every twin


@pytest.mark.parametrize("value", ["payments", "team-a-*", "t*", "a1", "9-*"])
def test_an_allowed_twin_name_is_a_namespace_name_or_the_start_of_one_and_a_star(value: str) -> None:
    assert re.fullmatch(NAME_OR_PREFIX_PATTERN, value)


@pytest.mark.parametrize("value", ["*", "-*", "Team-*", "team-*-web", "team_a", "a-", "", "a**", "a\n"])
def test_an_allowed_twin_name_is_nothing_else(value: str) -> None:
    assert not re.fullmatch(NAME_OR_PREFIX_PATTERN, value)


@pytest.mark.parametrize("value", ["1", "500m", "4Gi", "1.5", ".5", "2e3", "+1k", "100Mi", "0"])
def test_quantity_pattern_accepts_kubernetes_quantities(value: str) -> None:
    assert re.fullmatch(QUANTITY_PATTERN, value)


@pytest.mark.parametrize("value", ["lots", "", "4GB", "1 Gi", "Gi", "1.2.3", "5mi"])
def test_quantity_pattern_refuses_the_rest(value: str) -> None:
    assert not re.fullmatch(QUANTITY_PATTERN, value)


def test_cluster_ids_keep_the_tenant_namespace_a_dns_label() -> None:
    cluster_id = str(uuid.uuid4())
    assert re.fullmatch(CLUSTER_ID_PATTERN, cluster_id)
    for invalid in ("", "Upper", "-edge", "under_score"):
        assert not re.fullmatch(CLUSTER_ID_PATTERN, invalid)
    max_length = root(CRDS["ForeignCluster"])["properties"]["spec"]["properties"]["clusterID"]["maxLength"]
    assert len(names.tenant_namespace("x" * max_length)) == 63


def test_building_is_pure() -> None:
    first = all_crds()
    first[0]["spec"]["versions"][0]["additionalPrinterColumns"].clear()
    first[1]["metadata"]["labels"]["x"] = "y"
    assert all_crds() == all_crds()
    assert all_crds()[0]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert "x" not in all_crds()[1]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("value", "amount"), [("10Gi", True), ("+1", True), ("1e3", True), ("-1Gi", False), ("1e-3", True)]
)
def test_an_amount_is_a_quantity_that_cannot_be_negative(value: str, amount: bool) -> None:
    assert re.fullmatch(QUANTITY_PATTERN, value)
    assert bool(re.fullmatch(AMOUNT_PATTERN, value)) is amount
