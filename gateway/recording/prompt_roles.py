"""Each recorded chat call's prompt token roles (``CallRecord.prompt_roles``: one ``TokenRole`` byte per
prompt id), in both capture modes.

``tito``: the gateway rendered the prompt itself, turn by turn; each turn's roles were worked out when it
was first rendered (``gateway.tito.roles``) and the prompt's wait beside it until its call is recorded.

``engine``: vLLM rendered the prompt. The gateway renders the same messages with tito's renderer (its own
per-rollout turn cache, no splicing: a call costs its new turns, not its history) and keeps the roles
where its ids are exactly the engine's. Otherwise the call's roles are unknown (None), and so where the
gateway has no tokenizer and template for the model; each such call is counted by its reason
(``harnessrl_unknown_roles``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from gateway.metrics import GatewayMetrics
from gateway.tito.serving import TitoEngine
from store.records import RolloutIdentity

log = logging.getLogger(__name__)

TitoLoader = Callable[[], Awaitable[TitoEngine]]


@dataclass
class PromptRoles:
    """The gateway's one view of whether it can render the model's chats (kept across calls)."""

    no_renderer: bool = False  # no tokenizer and template (or none tito renders): engine calls' roles unknown

    async def of(
        self,
        identity: RolloutIdentity,
        chat_body: dict,
        prompt_ids: np.ndarray,
        tito: TitoLoader | None,
        metrics: GatewayMetrics,
    ) -> bytes | None:
        """The call's prompt roles as bytes (uint8, one per prompt id); None where unknown (counted)."""
        if tito is None:
            return None  # a gateway without tito (a benchmark's pipeline): nothing renders its chats
        capture = identity.capture
        if capture == "tito":
            rendered = (await tito()).take_roles(identity.rollout_id, prompt_ids)
            reason = "not_rendered"  # never expected: the call's prompt was rendered for it
        else:
            renderer = await self._renderer(tito)
            if renderer is None:
                rendered, reason = None, "no_renderer"
            else:
                rendered, reason = renderer.engine_roles(identity.rollout_id, chat_body, prompt_ids)
        if rendered is None:
            metrics.roles_unknown(capture, reason)
            return None
        if rendered.unplaced:
            metrics.roles_unknown(capture, "unplaced")
        return rendered.roles.tobytes()

    async def _renderer(self, tito: TitoLoader) -> TitoEngine | None:
        """tito's renderer, loaded once; None for good where it cannot load (no model folder, no
        tokenizer, a template tito cannot render turn by turn)."""
        if self.no_renderer:
            return None
        try:
            return await tito()
        except Exception as exc:  # whatever the reason, the gateway cannot render this model's chats
            log.warning("token roles of engine-captured calls are unknown: %s", exc)
            self.no_renderer = True
            return None
