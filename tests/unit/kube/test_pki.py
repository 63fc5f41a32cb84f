import datetime
import ssl

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from liqo.kube.pki import issue, kubeconfig, make_ca


def test_issued_certificate_chains_to_the_ca_with_names_and_usages() -> None:
    ca = make_ca("test-ca")
    leaf = issue(ca, common_name="system:kube-scheduler", organizations=["grp"], ip_addresses=["127.0.0.1"],
                 dns_names=["localhost"], server=True, client=True)  # fmt: skip
    cert = x509.load_pem_x509_certificate(leaf.cert)
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    cert.verify_directly_issued_by(ca_cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:kube-scheduler"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "grp"
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.not_valid_after_utc <= ca_cert.not_valid_after_utc
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) < datetime.timedelta(days=91)


def test_ca_is_usable_by_openssl() -> None:
    ca = make_ca("test-ca")
    ssl.create_default_context(cadata=ca.cert.decode())


def test_kubeconfig_embeds_credentials() -> None:
    config = kubeconfig(cluster="rome", server="https://127.0.0.1:1", ca=b"CA", user="u", cert=b"C", key=b"K")
    assert config["current-context"] == "rome"
    assert config["users"][0]["user"]["client-key-data"] == "Sw=="
