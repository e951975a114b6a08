"""Contracts between harnessrl's processes: what the gateway, the learner, the rollout runner and the CLI
say to each other over HTTP, in modules each side imports and that import neither side's code.

- ``gateway_client``: the one transport to the gateway's control plane (retries, backoff) and the one
  client of its REST API;
- ``publication``: the wire of publishing a policy version (``POST /admin/adapters``,
  ``GET /admin/policy``);
- ``adapter_proof``: the digest and the log-prob probe a publication carries, and how an engine's
  answer to the probe is judged.

prime-rl names its channels between processes ``transports/``; here they are called contracts because
they hold more than the channel: the data both sides compute and check (a digest, a probe, a
tolerance), which must agree on both sides. A module here may import the store's plain values (policy
names, column bounds) but never ``gateway``, ``learner``, ``harnesses`` or ``harnessrl``
(tests/unit/test_contracts.py), so a learner or a runner loads no server code to talk to the gateway.
"""
