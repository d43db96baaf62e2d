"""Run: studies as plugins and their runner, the registry of what is plugged in
(entry points), topologies by name, benchmarks."""
