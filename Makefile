# The two commands the README opens with: `make demo` and `make test`. Both set the machine up first.
PY := .venv/bin/python
PYTEST_ARGS ?=
# `make test` runs the suite on pytest-xdist workers, a unit of work being a test file or an xdist_group
# (tests/parallel.py; docs/testing.md, "Running the suite in parallel"). Most real-process tests wait on
# processes and timeouts, so one worker more than the cores keeps both busy; TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

.PHONY: setup test demo demo-secure soak hosts-soak bench bench-peers clean

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

demo: setup
	$(PY) -m qjournal demo

# the same failover demo on a secure cluster (mutual TLS, authorization, ZooKeeper TLS + digest: docs/security.md)
demo-secure: setup
	$(PY) -m qjournal demo --secure

# The long runs (not in make test): journal seeds, whole-cluster seeds, then real-process chaos of the
# journal and of the whole cluster (plain, then --secure), then the nemesis on hosts (network, clock, disk and
# process faults between namespace hosts, issue 28; needs root). Sizes: SEEDS, CLUSTER_SEEDS, JOBS, CHAOS_S,
# CLUSTER_CHAOS_S, SECURE_CHAOS_S, NEMESIS_S (0 = skip), NEMESIS_SEED.
soak: setup
	$(PY) -m qjournal.sim soak --seeds $${SEEDS:-2000} --jobs $${JOBS:-2}
	$(PY) -m qjournal.sim cluster-soak --seeds $${CLUSTER_SEEDS:-10000} --jobs $${JOBS:-2}
	if [ "$${CHAOS_S:-120}" != 0 ]; then $(PY) -m qjournal.chaos --duration-s $${CHAOS_S:-120} --seed $${CHAOS_SEED:-0}; fi
	if [ "$${CLUSTER_CHAOS_S:-1800}" != 0 ]; then $(PY) -m qjournal.chaos cluster --duration-s $${CLUSTER_CHAOS_S:-1800} --seed $${CHAOS_SEED:-0}; fi
	if [ "$${SECURE_CHAOS_S:-300}" != 0 ]; then $(PY) -m qjournal.chaos cluster --secure --duration-s $${SECURE_CHAOS_S:-300} --seed $${CHAOS_SEED:-0}; fi
	if [ "$${NEMESIS_S:-1800}" != 0 ]; then QJOURNAL_NEMESIS_S=$${NEMESIS_S:-1800} QJOURNAL_NEMESIS_SEED=$${NEMESIS_SEED:-0} \
	  $(PY) -m pytest tests/hosts/test_faults.py -m hosts -p no:randomly -q -s -k nemesis_soak; fi

# The heavier runs on test hosts (network namespaces, root; docs/deploy.md): the deployment, the rolling restart and
# the failover of make test, then a JournalNode host that lost its disk healing and a JournalNode replaced by a new host.
hosts-soak: setup
	QJOURNAL_HOSTS_HEAVY=1 $(PY) -m pytest tests/hosts -m hosts -p no:randomly -q -s

bench: setup
	$(PY) bench/run_all.py $(BENCH_ARGS)

# qjournal beside a 3-member etcd and a 3-server ZooKeeper, in one run (installs etcd and the clients first)
bench-peers:
	@bash bench/peers/setup.sh
	$(PY) bench/peers/peers_bench.py $(BENCH_ARGS)

clean:
	rm -rf .venv build src/*.egg-info .pytest_cache
