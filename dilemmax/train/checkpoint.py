"""The old home of checkpoint I/O, kept importable for the tests and scripts that use it.

Checkpoints and the run-folder layout live in :mod:`dilemmax.agents.checkpoint`, below both the
trainer and the trained policies.
"""

from dilemmax.agents.checkpoint import (  # noqa: F401 (re-exported)
    CHECKPOINT_DIR,
    CheckpointError,
    _plain,
    checkpoint_path,
    digest,
    find_checkpoint,
    from_bytes,
    latest_checkpoint,
    list_checkpoints,
    read_raw,
    restore,
    restore_latest_good,
    save,
    to_bytes,
)
