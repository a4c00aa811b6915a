"""The virtual-time loop: the clock jumps, order is reproducible, runs are bounded."""

from __future__ import annotations

import asyncio

import pytest

from qjournal.sim.loop import (START_TIME_S, SimulationLimitExceeded, SimulationStalled,
                               VirtualTimeLoop, run_simulation)


def test_sleep_costs_virtual_time_only():
    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(3600)
        return loop.time() - t0
    assert run_simulation(main, seed=1) == pytest.approx(3600)


def test_wait_for_times_out_in_virtual_time():
    async def main():
        loop = asyncio.get_running_loop()
        never = loop.create_future()
        t0 = loop.time()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(never, 20.0)
        return loop.time() - t0
    assert run_simulation(main, seed=1) == pytest.approx(20.0)


def _trace(seed: int) -> list:
    async def worker(name, out):
        loop = asyncio.get_running_loop()
        for _ in range(20):
            await asyncio.sleep(loop.rng.random())
            out.append((name, round(loop.time(), 9)))

    async def main():
        out: list = []
        await asyncio.gather(*(worker(n, out) for n in ["a", "b", "c"]))
        return out
    return run_simulation(main, seed=seed)


def test_same_seed_same_interleaving_and_different_seed_differs():
    assert _trace(7) == _trace(7)
    assert _trace(7) != _trace(8)


def test_clock_is_monotonic_and_constant_within_a_callback():
    seen = []

    async def main():
        loop = asyncio.get_running_loop()
        for d in [5, 0, 2, 0.5]:
            loop.call_later(d, lambda: seen.append((loop.time(), loop.time())))
        await asyncio.sleep(10)
    run_simulation(main, seed=3)
    times = [a for a, b in seen]
    assert all(a == b for a, b in seen)
    assert times == sorted(times)
    assert times[0] == START_TIME_S


def test_same_instant_timers_run_in_schedule_order():
    order = []

    async def main():
        loop = asyncio.get_running_loop()
        for i in range(10):
            loop.call_at(loop.time() + 1, order.append, i)
        await asyncio.sleep(2)
    run_simulation(main, seed=0)
    assert order == list(range(10))


def test_stall_is_detected():
    async def main():
        await asyncio.get_running_loop().create_future()
    with pytest.raises(SimulationStalled):
        run_simulation(main, seed=0)


def test_virtual_time_budget():
    async def main():
        while True:
            await asyncio.sleep(60)
    with pytest.raises(SimulationLimitExceeded):
        run_simulation(main, seed=0, max_virtual_time_s=3600)


def test_callback_budget():
    async def main():
        while True:
            await asyncio.sleep(0)
    with pytest.raises(SimulationLimitExceeded):
        run_simulation(main, seed=0, max_callbacks=1000)


def test_to_thread_runs_inline():
    async def main():
        return await asyncio.to_thread(lambda x: x * 2, 21)
    assert run_simulation(main, seed=0) == 42


def test_exception_from_executor_reaches_caller():
    def boom():
        raise ValueError("disk")

    async def main():
        with pytest.raises(ValueError):
            await asyncio.get_running_loop().run_in_executor(None, boom)
        return True
    assert run_simulation(main, seed=0)


def test_no_real_sockets():
    async def main():
        with pytest.raises(RuntimeError, match="in-memory"):
            await asyncio.get_running_loop().create_connection(lambda: None, "127.0.0.1", 1)
        return True
    assert run_simulation(main, seed=0)


def test_loop_is_reusable_standalone():
    loop = VirtualTimeLoop(5)
    try:
        assert loop.run_until_complete(asyncio.sleep(1, result="ok")) == "ok"
        assert loop.elapsed_s == pytest.approx(1)
    finally:
        loop.close()


def test_a_paused_process_holds_its_callbacks_and_a_killed_one_runs_nothing():
    from qjournal.sim.loop import SimProcess, run_in_process

    async def main():
        loop = asyncio.get_running_loop()
        p = SimProcess("p")
        ticks = []

        async def ticker():
            while True:
                await asyncio.sleep(1)
                ticks.append(round(loop.elapsed_s, 3))
        run_in_process(p, ticker())
        await asyncio.sleep(3.5)
        p.pause()                       # SIGSTOP: the tick due at 4.0 waits
        await asyncio.sleep(5)
        assert ticks == [1.0, 2.0, 3.0]
        p.resume()                      # SIGCONT at 8.5: the held tick runs now, then every second
        await asyncio.sleep(2.0)
        p.kill()                        # SIGKILL at 10.5
        await asyncio.sleep(5)
        return ticks
    assert run_simulation(main, seed=1) == [1.0, 2.0, 3.0, 8.5, 9.5]
