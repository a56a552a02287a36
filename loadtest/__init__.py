"""groupcoord loadtest: simulated KIP-848 and classic consumers driving a deployment over
gRPC, with latency histograms, time to Stable, invariant checks and a report (docs/loadtest.md).

Layout: ``scenario`` (what to run, TOML files and built-ins), ``members`` (the simulated
clients: KIP-848 ones are the member library, classic ones loops of their own),
``invariants`` (pure checkers fed by the members), ``stats`` (histograms and time series),
``runner`` (one run), ``report`` (JSON, HTML, PNG, compare) and ``cli`` (the
``groupcoord loadtest`` command).
"""
