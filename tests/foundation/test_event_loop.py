"""qjournal.event-loop: which loop a daemon runs on (cli/_daemon.py), with and without uvloop installed.

uvloop is optional (``qjournal[fast]``), so these tests stand a fake module in for it: what is checked is the
choice, not uvloop itself (docs/performance.md measures that)."""

import asyncio
import subprocess

import pytest

from qjournal.cli import _daemon
from qjournal.config import Configuration
from qjournal.errors import ConfigError
from qjournal.util.proc import qjournal_argv


class FakeUvloop:
    """Stands in for the uvloop module: its loops are asyncio's, counted."""

    def __init__(self) -> None:
        self.made = 0

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        self.made += 1
        return asyncio.new_event_loop()


def conf_with(value: str | None) -> Configuration:
    conf = Configuration()
    conf.set("qjournal.event-loop", value)
    return conf


@pytest.mark.parametrize("installed", [True, False])
@pytest.mark.parametrize("value", ["auto", "asyncio", "uvloop", " UVLOOP ", None])
def test_the_choice(monkeypatch, installed, value):
    fake = FakeUvloop()
    monkeypatch.setattr(_daemon, "uvloop", fake if installed else None)
    conf = conf_with(value)
    wants = (value or "auto").strip().lower()
    if wants == "uvloop" and not installed:
        with pytest.raises(ConfigError, match=r"uvloop is not installed \(pip install 'qjournal\[fast\]'"):
            _daemon.event_loop_factory(conf)
        return
    factory = _daemon.event_loop_factory(conf)
    if wants == "asyncio" or not installed:
        assert factory is None
    else:
        assert factory == fake.new_event_loop


def test_an_unknown_loop_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="qjournal.event-loop is 'tornado'; expected one of auto, asyncio, uvloop"):
        _daemon.event_loop_factory(conf_with("tornado"))


def test_run_daemon_runs_the_main_coroutine_on_the_chosen_loop(monkeypatch):
    fake = FakeUvloop()
    monkeypatch.setattr(_daemon, "uvloop", fake)

    async def main() -> int:
        return 7
    assert _daemon.run_daemon(conf_with("uvloop"), main()) == 7
    assert fake.made == 1
    assert _daemon.run_daemon(conf_with("asyncio"), main()) == 7
    assert fake.made == 1


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_daemon_with_an_unknown_loop_exits_with_the_reason(tmp_path):
    r = subprocess.run(qjournal_argv("-D", "qjournal.event-loop=tornado", "journalnode", "--edits-dir",
                                     str(tmp_path / "jn"), "--rpc-address", "127.0.0.1:0", "--http-address",
                                     "127.0.0.1:0"), capture_output=True, text=True, timeout=50)
    assert r.returncode == 1
    assert "qjournal.event-loop is 'tornado'" in r.stderr, r.stderr[-2000:]
