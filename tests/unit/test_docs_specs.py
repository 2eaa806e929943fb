"""What the docs (docs/interfaces.md) and examples/specs show is valid as written: the tokens file loads and
each spec passes the same validation as `POST /v1/gangs` / `POST /v1/deployments`."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from raygang.core.workload_specs import DeploymentSpec
from raygang.server.auth import AuthConfig
from raygang.server.models import GangSubmission

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_tokens_file_loads():
    text = (ROOT / "docs" / "interfaces.md").read_text()
    block = re.search(r"```yaml\n(tokens:.*?)```", text, re.DOTALL)
    assert block, "docs/interfaces.md shows a tokens file"
    auth = AuthConfig.from_document(yaml.safe_load(block.group(1)), "docs/interfaces.md")
    ops = auth.authenticate("Bearer a-long-random-admin-token")
    assert ops is not None and ops.admin


def test_example_specs_validate():
    train = GangSubmission.model_validate(
        yaml.safe_load((ROOT / "examples/specs/train.yaml").read_text()))
    assert train.gang_spec().world_size == 4 and train.programs()["worker"].is_import_path
    chat = DeploymentSpec.model_validate(
        yaml.safe_load((ROOT / "examples/specs/chat.yaml").read_text()))
    assert chat.import_path == "raygang.demo:echo" and chat.priority == "inference"
    pd = DeploymentSpec.model_validate(
        yaml.safe_load((ROOT / "examples/specs/pd.yaml").read_text()))
    assert pd.deployments["Prefill"].replicas == 2 and pd.import_path == "raygang.demo:pd"
