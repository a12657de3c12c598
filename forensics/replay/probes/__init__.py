"""The probes: each tests one hypothesis on a replayed incident (see docs/replay.md)."""
