"""Test helpers: tiny checkpoints, bounded child runs, manifest views, and the probe and engine
scripts the tests run by path in fresh processes (some under other venvs)."""
