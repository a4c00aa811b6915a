"""The runbook of an operator's document: marked blocks, their steps, and the few translations (pure)."""

from __future__ import annotations

import pytest

from qjournal.hosts.cluster import step_stats
from qjournal.hosts.netns import HostsError
from qjournal.hosts.runbook import block_steps, fenced_block, parse_runbook
from qjournal.sim.history import History, NsRead, OpAcked, OpCalled, OpFailed

DOC = """# a guide
```sh
echo not marked: an operator's by hand
```

```sh id=first on=role:journalnode
systemctl daemon-reload
sudo -u qjournal /opt/qjournal/bin/qjournal namenode -format
systemctl restart qjournal-journalnode qjournal-zkfc
timeout 5 sh -c 'until true; do \\
    sleep 1; done'
```

1. A step inside a list:

   ```sh id=second on=nn1,nn2 serial
   echo indented
   ```

```toml id=desc
nameservice = "ns1"
```
"""


def test_marked_blocks_are_found_with_where_they_run():
    blocks = parse_runbook(DOC, "guide.md")
    assert list(blocks) == ["first", "second"]
    assert (blocks["first"].on, blocks["first"].serial, blocks["first"].line) == ("role:journalnode", False, 6)
    assert (blocks["second"].on, blocks["second"].serial) == ("nn1,nn2", True)
    assert fenced_block(DOC, "toml", "desc", "guide.md") == 'nameservice = "ns1"\n'


def test_systemctl_lines_are_steps_of_their_own_and_sudo_is_dropped():
    steps = block_steps(parse_runbook(DOC, "guide.md")["first"])
    assert [(s.kind, s.words) for s in steps] == [
        ("systemctl", ("daemon-reload",)), ("shell", ()),
        ("systemctl", ("restart", "qjournal-journalnode", "qjournal-zkfc")), ("shell", ())]
    assert steps[1].text == "/opt/qjournal/bin/qjournal namenode -format\n"
    assert "until true; do  sleep 1; done" in steps[3].text      # continuation joined


@pytest.mark.parametrize("doc, error", [
    ("```sh id=a\necho\n```\n", "needs id= and on="),
    ("```sh id=a on=x when=now\necho\n```\n", "needs id= and on="),
    ("```sh id=a on=x\necho\n", "not closed"),
    ("```sh id=a on=x\n```\n```sh id=a on=y\n```\n", "used twice"),
])
def test_a_malformed_marked_block_is_refused(doc, error):
    with pytest.raises(HostsError, match=error):
        parse_runbook(doc, "guide.md")


def test_step_stats_count_failures_and_the_longest_operation_overlapping_each_step():
    t = iter([0.0, 1.0, 2.0, 2.5, 6.0, 7.0, 7.5]).__next__
    h = History(clock=t)
    h.add(OpCalled("a", 0, "create", "/a/f1"))          # 0.0
    h.add(OpAcked("a", 0, "nn1"))                        # 1.0
    h.add(OpCalled("a", 1, "create", "/a/f2"))          # 2.0
    h.add(OpCalled("b", 0, "mkdirs", "/b"))             # 2.5
    h.add(OpAcked("a", 1, "nn2"))                        # 6.0: 4 s, across both steps
    h.add(OpFailed("b", 0, "RpcTimeoutError"))           # 7.0
    h.add(NsRead("a", "nn2", "/a/f1", True, call_time=7.2))   # 7.5
    s1, s2 = step_stats(h, [("one", 0.5, 3.0), ("two", 5.0, 8.0)])
    assert (s1.ops, s1.failed, s1.max_latency_s, s1.slowest) == (1, 0, 4.5, "mkdirs /b by b")
    assert (s2.ops, s2.failed, s2.max_latency_s) == (3, 1, 4.5)
