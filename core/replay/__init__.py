"""Record and replay: see what a config change does to real conversations.

* `antler.replay.recorder` records a conversation while it runs (`antler run
  --record FILE`, `create_agent(record=...)`, the `record:` config section);
  `antler.replay.export` writes one from a saved thread's history.
* `antler.replay.recording` is the file: the scripted-model format plus a
  `recording:` header (version, config digest, chain, inputs, observed runs).
* `antler.replay.replayer` plays a recording against a config offline, answering
  model calls from it by position and reporting requests that diverge.
* `antler.replay.diff` compares two replays (or a replay and the recording) run by
  run; `antler.replay.html` draws the comparison; `antler.replay.suite` replays a
  directory of recordings in parallel.

This package module imports nothing, so reading a config (which validates the
`record:` section, `antler.replay.settings`) stays cheap.
"""
