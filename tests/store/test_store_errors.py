"""Opening a store fails with a readable StoreConnectionError that names the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1.store import StoreConnectionError, StoreError, TraceStore, normalize_url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty database URL"),
        ("   ", "empty database URL"),
        ("://nothing", "cannot parse database URL"),
        ("postgresql://user@localhost:notaport/db", "cannot parse database URL"),
        ("mysql://user@localhost/db", "unsupported database 'mysql'"),
        ("http://example.com/traces", "unsupported database 'http'"),
    ],
    ids=["empty", "blank", "no-scheme", "bad-port", "mysql", "http"],
)
def test_malformed_or_unsupported_url(url: str, message: str) -> None:
    with pytest.raises(StoreConnectionError, match=message) as info:
        TraceStore.open(url)
    assert "sqlite" in str(info.value) and "postgresql" in str(info.value)  # says what would work


def test_sqlite_in_missing_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "folder"
    for url in (f"sqlite:///{missing}/traces.db", str(missing / "traces.db")):
        with pytest.raises(StoreConnectionError, match=r"folder .*no/such/folder does not exist"):
            TraceStore.open(url)
    assert not missing.parent.parent.exists()  # and nothing was created on the way


def test_plain_path_means_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert normalize_url("traces.db") == f"sqlite:///{tmp_path / 'traces.db'}"
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    with TraceStore.open("traces.db") as store:
        assert store.dialect == "sqlite"
    assert (tmp_path / "traces.db").is_file()


@pytest.mark.postgres
def test_unreachable_postgres_port() -> None:
    with pytest.raises(StoreConnectionError) as info:
        TraceStore.open("postgresql://postgres:s3cret@127.0.0.1:1/agentr1")
    text = str(info.value)
    assert "cannot connect to" in text and "127.0.0.1" in text and "port 1" in text
    assert "refused" in text.lower()
    assert "s3cret" not in text  # the password never reaches logs


@pytest.mark.postgres
def test_missing_postgres_database(pg_url: str) -> None:
    url = pg_url.rsplit("/", 1)[0] + "/agentr1_no_such_database"
    with pytest.raises(StoreConnectionError, match='database "agentr1_no_such_database" does not exist'):
        TraceStore.open(url)


def test_errors_share_a_base_class() -> None:
    assert issubclass(StoreConnectionError, StoreError)
