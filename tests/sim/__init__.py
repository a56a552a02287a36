"""The simulator's tests (docs/simulation.md)."""

from sim.events import Config

#: the world of the sweep's seeds before the streams application came in (2026-12-06):
#: a failure found then replays as it was found only without it (a streams seed's network
#: and loop draw other numbers)
AS_SWEPT = Config(streams_share=0.0, txn_share=0.0)
#: ... before the streams threads reported task offsets and had client tags, and before the
#: transactional application (2026-12-07): the streams seeds found until then (those shares
#: are drawn by RNGs of their own, so a seed's scenario is otherwise the same)
AS_SWEPT_STREAMS = Config(
    streams_offsets_share=0.0, streams_rack_share=0.0, txn_share=0.0, streams_eos_share=0.0
)
#: ... with every share as it was in the sweep since e91bf9a (2026-12-07): the seeds found then
#: (a share added later must be zero here)
AS_SWEPT_TXN = Config(
    txn_hang_share=0.0,
    txn_classic_share=0.0,
    streams_eos_share=0.0,
    txn_gateway_share=0.0,
    streams_eos_hang_share=0.0,
)
#: ... with every share as it was in the sweep since 549b03c (2026-12-07: exactly-once streams
#: threads crashing in transactions): the seeds found then (a share added later must be zero
#: here)
AS_SWEPT_EOS_HANGS = Config()
