"""Each network fault of ``qjournal.hosts.faults`` does what its name says on real namespace hosts, and
healing leaves every host's routes and rules as they were (no cluster: three hosts and a listener each)."""

from __future__ import annotations

import subprocess
import time

import pytest

from qjournal.hosts.faults import NetworkFaults
from qjournal.hosts.netns import Network, unavailable_reason

pytestmark = [pytest.mark.slow, pytest.mark.hosts, pytest.mark.xdist_group("hosts")]

PORT = 9000
LISTENER = ("import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            f"s.bind(('0.0.0.0',{PORT}));s.listen(16)\nprint('READY {{}}',flush=True)\n"
            "while True:\n c,_=s.accept()\n c.close()")
PROBE = ("import socket,sys\ns=socket.socket();s.settimeout(0.4)\n"
         "try:\n s.connect((sys.argv[1],int(sys.argv[2])));print('ok')\n"
         "except Exception as e: print(type(e).__name__)")


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    why = unavailable_reason()
    if why is not None:
        pytest.skip(f"hosts tests skipped: {why}")
    with Network(str(tmp_path_factory.mktemp("netfaults"))) as n:
        for name in ("a", "b", "c"):
            h = n.add_host(name)
            h.spawn("listener", ["python3", "-c", LISTENER], log_path=str(tmp_path_factory.mktemp(name) / "l.log"))
        yield n


def reach(net, src: str, dst: str) -> str:
    """``ok``, ``TimeoutError`` (silent), ``OSError``/``PermissionError`` (fast failure)."""
    return net.host(src).run(["python3", "-c", PROBE, net.host(dst).address, str(PORT)]).stdout.strip()


def tables(net):
    return {h.name: (h.routes(), h.ip("rule", "show").stdout, h.ip("neigh", "show", "nud", "permanent").stdout)
            for h in net}


def machine_tables() -> tuple[str, ...]:
    """The machine's own network namespace: never touched (netns invariant 1)."""
    return tuple(subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout
                 for args in (["route", "show", "table", "all"], ["rule", "show"], ["link", "show"],
                              ["neigh", "show", "nud", "permanent"]))


def test_every_fault_and_its_healing(net):
    before, machine = tables(net), machine_tables()
    f = NetworkFaults(net)
    assert reach(net, "a", "b") == "ok"

    cut = f.silent("a", "b")
    assert (reach(net, "a", "b"), reach(net, "b", "a"), reach(net, "a", "c")) == ("TimeoutError", "TimeoutError", "ok")
    f.heal(cut)
    assert reach(net, "a", "b") == "ok"

    cut = f.silent("a", "b", one_way=True)
    # a's packets to b vanish; b's reach a, but a's answers are lost: both directions' connections fail
    assert (reach(net, "a", "b"), reach(net, "b", "a")) == ("TimeoutError", "TimeoutError")
    assert reach(net, "b", "c") == "ok"
    f.heal(cut)

    cut = f.fast_fail("a", "b")
    assert (reach(net, "a", "b"), reach(net, "b", "a")) == ("OSError", "OSError")   # EHOSTUNREACH, at once
    f.heal(cut)
    cut = f.fast_fail("a", "b", how="prohibit")
    assert reach(net, "a", "b") == "PermissionError"
    f.heal(cut)

    cut = f.isolate("c")
    assert (reach(net, "a", "c"), reach(net, "c", "b"), reach(net, "a", "b")) == ("TimeoutError",) * 2 + ("ok",)
    f.heal(cut)
    assert reach(net, "a", "c") == "ok"

    cut = f.bridge("a", "b", "c")
    assert (reach(net, "a", "b"), reach(net, "b", "c"), reach(net, "a", "c")) == ("ok", "ok", "TimeoutError")
    f.heal(cut)

    split = f.split(["a"], ["b", "c"])
    inner = f.silent("b", "c")            # overlapping faults: healing one keeps the other's routes
    f.heal(split)
    assert (reach(net, "a", "b"), reach(net, "b", "c")) == ("ok", "TimeoutError")
    f.heal(inner)

    cut = f.local_port("a", PORT)
    assert (reach(net, "a", "a"), reach(net, "b", "a")) == ("TimeoutError", "ok")
    f.heal(cut)
    assert reach(net, "a", "a") == "ok"

    cut = f.flap("b", "c", period_s=0.2, duration_s=30)
    seen = set()
    deadline = time.monotonic() + 10
    while seen != {"ok", "TimeoutError"} and time.monotonic() < deadline:
        seen.add(reach(net, "b", "c"))
    f.heal(cut)
    assert seen == {"ok", "TimeoutError"}

    assert machine_tables() == machine       # with every kind applied at least once
    f.heal_all()
    assert tables(net) == before
    assert f.counts == {"silent_partition": 2, "one_way_partition": 1, "fast_fail_partition": 2, "host_isolated": 1,
                        "bridge": 1, "majority_minority_split": 1, "local_port_cut": 1, "flapping": 1}
