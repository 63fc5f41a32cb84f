"""The chart's generated files are what src/liqo/install renders today (`make chart` rewrites them)."""

from __future__ import annotations

from pathlib import Path

import yaml

from liqo.install import chart, manifests
from liqo.install.values import Values

CHART = Path(__file__).resolve().parents[3] / "charts" / "liqo"


def test_the_committed_chart_files_are_the_generated_ones() -> None:
    stale = [name for name, text in chart.generated_files().items() if (CHART / name).read_text() != text]
    assert not stale, f"run `make chart`: {', '.join(stale)} differ from what src/liqo/install renders"


def test_values_yaml_spells_every_field_of_values_and_its_defaults() -> None:
    written = yaml.safe_load((CHART / "values.yaml").read_text())
    assert written == chart.REQUIRED.to_helm()
    assert Values(api_server_url="", pod_cidr="", service_cidr="") == chart.REQUIRED


def test_the_webhook_registrations_leave_only_the_client_config_to_the_template() -> None:
    text = chart.generated_files()["templates/webhooks.yaml"]
    assert text.count('include "liqo.webhookClientConfig"') == 2
    assert chart._CLIENT_CONFIG not in text  # every marker was replaced
    rendered = [
        manifests.pod_webhook_configuration(client_config={}),
        manifests.shadow_pod_webhook_configuration(client_config={}),
        *manifests.pod_placement_policy(),
    ]
    for item in rendered:
        assert item["metadata"]["name"] in text
    # The placement policy and the pod webhook exclude each other, by what the API server serves.
    assert text.count(chart.PLACEMENT_POLICY_SERVED) == 1


def test_no_generated_file_holds_template_syntax_by_accident() -> None:
    for name, text in chart.generated_files().items():
        if name != "templates/webhooks.yaml":
            assert "{{" not in text, name
