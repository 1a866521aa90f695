"""The store kits: the implementation behind `agentfsm.testing`'s conformance suite.

Private: users import `StoreConformance`, `AsyncStoreConformance`, `Tamper`, `race_appends`,
`crash_trials` and `scripted_run` from `agentfsm.testing`. From the ground up:

- `scripted` (legal runs of whole tool turns, to append), `tamper` (the `Tamper` protocol
  and the forged data the bad-data checks use);
- the checks mixed into the suite, one concern each: `attachment_checks`, `migration_checks`,
  `snapshot_checks` and `integrity_checks` (bad data), `key_checks` (one key per store),
  `anchor_checks` (external anchors);
- `conformance` (the suite, gathering the checks) and `process_checks` (writers racing
  and killed in real processes).

The checks need pytest (they are test classes and fixtures); `scripted`, `tamper` and
`process_checks` need nothing beyond agentfsm. Each module imports only names another's
`__all__` lists (the group's internal API).
"""
