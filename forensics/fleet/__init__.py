"""Fleet view of a store with several runs: runs x incidents, spikes recurring across runs.

    compare(store, out)  -> Fleet   (runs detection on every run, reads what it stored)

Detection owns the numbers (incidents, hypotheses, recurrences tables); this package only
reads them back and draws the overlay figure (figure.py).
"""

from forensics.fleet.summary import Fleet, FleetRun, compare

__all__ = ["Fleet", "FleetRun", "compare"]
