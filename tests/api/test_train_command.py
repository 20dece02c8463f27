"""`arbiter train dl2`: the retraining job from the command line, on the service's database."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.cli import main
from app.settings import Settings
from tests.api.retrain_helpers import AUTH, TINY_BUDGET, log_decisions

TINY_FLAGS = [f"--{name.replace('_', '-')}={value}" for name, value in TINY_BUDGET.items()]


@pytest.fixture
def environment(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARBITER_DATABASE_URL", settings.database_url)
    monkeypatch.delenv("ARBITER_REDIS_URL", raising=False)


@pytest.mark.usefixtures("environment")
def test_train_stores_a_version_and_prints_the_outcome(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    log_decisions(client)

    status = main(["train", "dl2", "--profile", "drf", "--activate", "never", *TINY_FLAGS])

    outcome = json.loads(capsys.readouterr().out)
    assert status == 0
    assert outcome["status"] == "succeeded"
    assert outcome["metrics"]["activated"] is False
    job = client.get(f"/admin/retrain/{outcome['id']}", headers=AUTH).json()
    assert job["version"] == outcome["version"]
    models = client.get("/admin/models", headers=AUTH).json()
    assert [(m["version"], m["active"]) for m in models] == [(outcome["version"], False)]


@pytest.mark.usefixtures("environment")
def test_train_plays_dl2s_episodes_on_local_processes(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    log_decisions(client)

    status = main(["train", "dl2", "--activate", "never", "--processes", "2", *TINY_FLAGS])

    outcome = json.loads(capsys.readouterr().out)
    assert status == 0
    assert outcome["status"] == "succeeded"
    assert outcome["metrics"]["ppo_updates"] == 1


@pytest.mark.usefixtures("environment")
def test_train_refuses_an_empty_window_with_exit_status_2(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    log_decisions(client, count=1)

    status = main(["train", "dl2", "--since", "2999-01-01T00:00:00+00:00", *TINY_FLAGS])

    assert status == 2
    assert "no decision logged" in capsys.readouterr().err


@pytest.mark.usefixtures("environment")
def test_train_refuses_a_bad_budget_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["train", "dl2", "--updates", "-3"])

    assert status == 2
    assert "budget.updates" in capsys.readouterr().err


def test_train_refuses_processes_for_a_policy_that_plays_no_episodes_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["train", "relmas", "--processes", "2"])

    assert status == 2
    assert "apply to dl2 and dl2-srtf only" in capsys.readouterr().err


def test_worker_without_redis_says_why_it_cannot_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ARBITER_REDIS_URL", raising=False)

    assert main(["worker", "--burst"]) == 2
    assert "ARBITER_REDIS_URL is not set" in capsys.readouterr().err


@pytest.mark.usefixtures("environment")
def test_train_on_a_database_without_the_schema_says_to_upgrade_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No client here: nothing started the service, so nothing made its tables.
    status = main(["train", "dl2", *TINY_FLAGS])

    assert status == 2
    error = capsys.readouterr().err
    assert "has no Arbiter schema" in error
    assert "arbiter db upgrade" in error


@pytest.mark.usefixtures("environment")
def test_train_refuses_a_process_count_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["train", "dl2", "--processes", "0"])

    assert exited.value.code == 2
    assert "argument --processes: must be 1 or more: 0" in capsys.readouterr().err
