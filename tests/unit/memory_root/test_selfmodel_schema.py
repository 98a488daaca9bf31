"""The SelfModel JSON formats (docs/schemas/) describe what memroot reads and prints.

Three JSON Schemas (draft 2020-12): the SelfModel a user or hook hands in
(``selfmodel.schema.json``), the recorded snapshot memroot prints
(``selfmodel-snapshot.schema.json``) and the memory root record a hook receives and a SelfModel
cites (``root-record.schema.json``). Each is checked against the real code's output (a fresh
run of examples/selfmodel_examples.py) and the committed example files, and the input schema
refuses what ``SelfModel.from_json`` refuses.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema comes with memroot[test]")

from memroot.ledger import encoding  # noqa: E402
from memroot.ledger.errors import ValidationError  # noqa: E402
from memroot.memory_root.selfmodel import SelfModel, selfmodel_root  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = ROOT / "docs" / "schemas"
EXAMPLES = ROOT / "examples"


def _validator(name: str) -> Any:
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


SELFMODEL = _validator("selfmodel.schema.json")
SNAPSHOT = _validator("selfmodel-snapshot.schema.json")
ROOT_RECORD = _validator("root-record.schema.json")


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "selfmodel_examples", EXAMPLES / "selfmodel_examples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assert_snapshot_rederives(snap: dict[str, Any]) -> None:
    """What an outside auditor re-derives: selfmodel_root from the body (hex back to bytes)."""
    body = dict(snap["body"])
    cited = body["memory_root"]
    body["memory_root"] = None if cited is None else bytes.fromhex(cited)
    assert selfmodel_root(body).hex() == snap["selfmodel_root"]
    assert cited == snap["memory_root"]
    encoding.decode(encoding.encode(body))  # the body is canonical CBOR data


def test_a_fresh_run_of_the_real_code_validates(tmp_path: Path) -> None:
    """`selfmodel show --json` and `roots --json` of a real ledger match their schemas."""
    snapshot_file, root_file = _generator().make(tmp_path)
    snap = json.loads(snapshot_file.read_text())
    root = json.loads(root_file.read_text())
    SNAPSHOT.validate(snap)
    ROOT_RECORD.validate(root)
    assert snap["memory_root"] == root["memory_root"] and snap["memory_root_state"] == "live"
    _assert_snapshot_rederives(snap)


def test_the_committed_examples_validate() -> None:
    """examples/selfmodel.json, selfmodel-snapshot.json and root-record.json match the schemas."""
    given_model = json.loads((EXAMPLES / "selfmodel.json").read_text())
    SELFMODEL.validate(given_model)
    SelfModel.from_json(given_model)  # and the code takes it
    snap = json.loads((EXAMPLES / "selfmodel-snapshot.json").read_text())
    SNAPSHOT.validate(snap)
    _assert_snapshot_rederives(snap)
    ROOT_RECORD.validate(json.loads((EXAMPLES / "root-record.json").read_text()))


def test_a_confined_root_without_counts_validates() -> None:
    """The MCP rendering (counts=False) is a root record too."""
    root = json.loads((EXAMPLES / "root-record.json").read_text())
    for p in root["projections"]:
        del p["count"]
    ROOT_RECORD.validate(root)


@pytest.mark.parametrize(
    "bad",
    [
        {"identity": {}},  # no agent_id
        {"agent_id": ""},
        {"agent_id": "a", "actor": "x"},  # an unknown field
        {"agent_id": "a", "identity": {"name": 7}},
        {"agent_id": "a", "identity": []},
        {"agent_id": "a", "capabilities": [{"name": "n"}]},  # no claim
        {"agent_id": "a", "capabilities": [{"name": "n", "claim": "c", "proof": []}]},
        {"agent_id": "a", "capabilities": [{"name": "n", "claim": "c", "evidence": "x"}]},
        {"agent_id": "a" * 4097},
        [],
    ],
    ids=repr,
)
def test_the_schema_refuses_what_the_code_refuses(bad: Any) -> None:
    """A SelfModel the schema refuses, `SelfModel.from_json` refuses too (and vice versa)."""
    assert not SELFMODEL.is_valid(bad)
    with pytest.raises(ValidationError):
        SelfModel.from_json(bad)


_text = st.text(st.characters(codec="utf-8"), min_size=0, max_size=6)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_capability = st.dictionaries(
    st.sampled_from(["name", "claim", "evidence", "extra"]), _json_values, max_size=4
)
_candidate = st.dictionaries(
    st.sampled_from(["agent_id", "identity", "capabilities", "extra"]),
    _json_values | st.lists(_capability, max_size=3),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(_candidate)
def test_schema_and_code_agree_on_any_json(obj: dict[str, Any]) -> None:
    """On arbitrary JSON, the input schema accepts exactly what `SelfModel.from_json` accepts,
    except duplicate capability names (refused by the code; JSON Schema cannot say it)."""
    try:
        model = SelfModel.from_json(obj)
    except ValidationError:
        caps = obj.get("capabilities")
        names = (
            [c.get("name") for c in caps if isinstance(c, dict)] if isinstance(caps, list) else []
        )
        duplicate = len(names) != len(set(map(repr, names)))
        assert duplicate or not SELFMODEL.is_valid(obj), obj
    else:
        assert SELFMODEL.is_valid(obj), obj
        assert model.agent_id == obj["agent_id"]
