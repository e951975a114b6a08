"""Where the verifier runs, so that nothing the agent left outside its work can run in it or speak for it.

A task's ``grade_in`` (task.toml ``[verifier] grade_in``, a JSONL task's ``"grade_in"``) says where:

- ``fresh_sandbox`` (the default): a new sandbox of the same backend made from the task's own machine
  (docker: the task's image, without the agent installed; local: its exported root, or the host's system
  dirs for tasks without an image), with no route to the gateway. The agent's working directory (the
  image's WORKDIR, else /workspace) is copied in, and nothing else: its $HOME, /tmp, processes and every
  file it changed elsewhere (a replaced /usr/local/bin/python3, /etc/ld.so.preload) stay behind.
- ``agent_sandbox``: the agent's own sandbox, for a verifier that needs what the agent left outside its
  working directory (a service it started, packages it installed, files under /etc or $HOME). Every
  process of the agent is stopped first and the verifier gets a fresh $HOME and a clean environment
  (`Sandbox.exec_verifier`), but a docker agent is root in its container: files it changed outside the
  workspace are not undone there.

A workspace of "/" (an image whose WORKDIR is the root) cannot be copied: such a task grades in the
agent's sandbox.

Either way the verifier's Python looks for a module in the working directory only after the standard
library and site-packages (sandboxes/verifier_site.py): a json.py or pytest.py the agent left there
cannot stand in for the real one, and the tests still import the agent's own modules.
"""

from __future__ import annotations

from collections.abc import Mapping

from harnesses.grading.verify import Verdict, verify
from harnesses.task import Task
from sandboxes import Sandbox, SandboxSpec, create_sandbox
from sandboxes.kinds import Kind


async def grade(
    kind: Kind | str,  # sandboxes.kinds
    agent: Sandbox,
    task: Task,
    fresh: SandboxSpec | None,
    options: Mapping | None = None,
    logs: Mapping[str, bytes] | None = None,
) -> Verdict:
    """The verifier's verdict on the agent's work: in a sandbox made from `fresh` holding a copy of the
    agent's workspace (the agent's sandbox is closed before the verifier starts), or, with `fresh` None,
    in the agent's own. `logs` (absolute path -> content) are written where the verifier runs."""
    if fresh is None:
        await _write(agent, logs)
        return await verify(agent, task)
    async with await create_sandbox(kind, fresh, **(options or {})) as grader:
        await agent.copy_workspace_to(grader)
        await agent.close()  # nothing of the agent runs on, nor holds its resources, while grading
        await _write(grader, logs)
        return await verify(grader, task)


FINAL_ANSWER = "/logs/agent/final.txt"  # the agent's last answer, for verifiers that grade what it said


async def final_answer(agent: Sandbox, said: str) -> dict[str, bytes]:
    """The verifier's /logs/agent/final.txt: what the agent said last, else what it wrote there itself
    (the oracle writes its answer there), else empty."""
    if said:
        return {FINAL_ANSWER: said.encode()}
    try:
        return {FINAL_ANSWER: await agent.get_file(FINAL_ANSWER)}
    except FileNotFoundError:
        return {FINAL_ANSWER: b""}


async def _write(sandbox: Sandbox, files: Mapping[str, bytes] | None) -> None:
    for path, data in (files or {}).items():
        await sandbox.put_file(path, data)
