"""System tests: real ``queuecore-server`` processes (and NATS, Postgres, Redis processes) started, killed,
paused, cut off, drained and restarted - crashes, outages, faults, several nodes. They mirror no module of
app/, so they live here rather than beside the tests that do; ``faults/`` is the fault harness (recorded
histories, their checker, the load, NATS/Redis/network faults, the rolling restart) that bench/faults.py
and bench/rolling_restart.py run long."""
