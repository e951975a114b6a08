"""Incremental rendering with splicing: the prompt ids of a chat, built turn by turn.

ChatML-family templates render each turn on its own, and every turn starts with a special token,
so the ids of a conversation are the concatenation of its turns' ids. A turn is rendered and
tokenized once; later requests of the same conversation reuse its ids (a turn costs work in
proportion to what it adds). An assistant turn whose parsed content and tool calls match what the
model sampled earlier is replaced by the exact sampled ids, so turn k+1's prompt extends turn k's
prompt + output by construction, however the agent re-serialized it.

A prompt is made as an int32 array with its JSON (``RenderedPrompt``): each turn's ids are written
as JSON once, when the turn is first rendered, and a request's prompt is its turns' JSON joined. So
a turn costs the gateway one copy of the resent history's ids (and one of their JSON, straight into
the request), no Python int per resent token. Each turn's token roles (``gateway.tito.roles``) are
worked out with its ids and kept beside them, a uint8 array: the prompt's roles cost one copy too.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import is_

import numpy as np
import orjson

from gateway.engine.token_prefix import IDS
from gateway.tito.messages import arguments, for_template, message_text
from gateway.tito.roles import ROLES, TurnRoles, filled
from gateway.tito.template import ModelText
from store.records import TokenRole

__all__ = ["RenderedPrompt", "RolloutText", "TurnRenderer", "fingerprint", "for_template", "split_turns"]

CONVERSATIONS_PER_ROLLOUT = 4  # main loop, subagents, side calls
SAMPLED_PER_ROLLOUT = 512  # assistant turns remembered for splicing
_NO_IDS = np.zeros(0, IDS)
_NO_ROLES = np.zeros(0, ROLES)
PENDING_ROLES = 16  # per rollout: prompts sent and not yet recorded (calls in flight)


def fingerprint(message: dict) -> str:
    """An assistant turn's identity by parsed content and tool calls, never by raw strings."""
    calls = [
        [(c.get("function") or c).get("name"), arguments((c.get("function") or c).get("arguments"))]
        for c in message.get("tool_calls") or []
    ]
    return json.dumps([message_text(message.get("content")).strip(), calls], sort_keys=True, ensure_ascii=False)


def split_turns(messages: list[dict], turns: list[list[dict]] | None = None) -> list[list[dict]]:
    """One turn per message, except that consecutive tool results share one turn; ``turns``: those of
    earlier messages, continued (a turn a tool result joins is made anew, not changed)."""
    turns = [] if turns is None else turns
    for message in messages:
        if message.get("role") == "tool" and turns and turns[-1][-1].get("role") == "tool":
            turns[-1] = [*turns[-1], message]
        else:
            turns.append([message])
    return turns


@dataclass(frozen=True)
class RenderedPrompt:
    ids: np.ndarray  # int32, read-only: the turns' ids one after the other, then the generation prompt
    json: tuple[bytes, ...]  # the ids as a JSON array, in parts that join to it (b"[", a turn's, b",", ...)
    roles: np.ndarray  # uint8, read-only: each id's TokenRole (gateway.tito.roles)
    unplaced: int = 0  # turns whose contents could not be placed (their roles UNKNOWN)


@dataclass
class Conversation:
    tools: list[dict] | None
    messages: list[dict]  # as the request had them (the chat route parses a resent history into the same objects)
    turns: list[list[dict]]
    json: list[bytes]  # per turn: its ids as JSON, no brackets (b"1,2,3")
    flat: np.ndarray  # int32, read-only: the turns' ids one after the other
    ends: list[int]  # where each turn's ids end in ``flat``
    roles: np.ndarray  # uint8, read-only: each of ``flat``'s ids' TokenRole
    unplaced: list[int]  # per turn: how many turns up to it (itself included) have UNKNOWN roles


@dataclass
class RolloutText:
    """Per rollout: cached conversations and the sampled ids of its assistant turns."""

    conversations: list[Conversation] = field(default_factory=list)
    sampled: OrderedDict[str, list[int]] = field(default_factory=OrderedDict)
    # Prompts rendered for calls not recorded yet, by the id of their ids' array: their roles.
    pending: OrderedDict[int, RenderedPrompt] = field(default_factory=OrderedDict)

    def sent(self, prompt: RenderedPrompt) -> None:
        """A prompt sent to the engine: its roles wait for its call's record (``take_roles``)."""
        self.pending[id(prompt.ids)] = prompt
        while len(self.pending) > PENDING_ROLES:
            self.pending.popitem(last=False)

    def take_roles(self, prompt_ids: np.ndarray) -> RenderedPrompt | None:
        """The prompt rendered for these very ids (the array the answer carries), once."""
        prompt = self.pending.pop(id(prompt_ids), None)
        return prompt if prompt is not None and prompt.ids is prompt_ids else None

    def remember(self, message: dict, output_ids: list[int]) -> None:
        self.sampled[fingerprint(message)] = output_ids
        self.sampled.move_to_end(fingerprint(message))
        while len(self.sampled) > SAMPLED_PER_ROLLOUT:
            self.sampled.popitem(last=False)


class TurnRenderer:
    def __init__(self, text: ModelText):
        self.text = text
        header = text.template.render([], add_generation_prompt=True)
        self.generation_prompt = text.encode(header)
        self._generation_json = orjson.dumps(self.generation_prompt)[1:-1]
        self._generation_roles = filled(TokenRole.TEMPLATE, len(self.generation_prompt))
        self._after_eos = self._suffix_after_eos()
        self.roles = TurnRoles(text, header)

    def _suffix_after_eos(self) -> list[int]:
        """Ids the template puts after an assistant turn's end token (ChatML: a newline)."""
        rendered = self.text.template.render([{"role": "assistant", "content": "x"}])
        eos = self.text.tokenizer.id_to_token(self.text.eos_id) if self.text.eos_id is not None else None
        if not eos or eos not in rendered:
            raise ValueError(
                "the chat template does not end assistant turns with the eos token; "
                "tito capture needs a ChatML-style template"
            )
        return self.text.encode(rendered.rsplit(eos, 1)[1])

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None, state: RolloutText) -> RenderedPrompt:
        turns, cached, shared = _turns(state.conversations, messages, tools)
        # The shared turns' ids, roles and JSON are reused: a turn costs work in proportion to what it adds.
        end = cached.ends[shared - 1] if cached is not None and shared else 0
        known, known_roles = (cached.flat[:end], cached.roles[:end]) if end else (_NO_IDS, _NO_ROLES)
        json = cached.json[:shared] if cached is not None else []
        ends = cached.ends[:shared] if cached is not None else []
        unplaced = cached.unplaced[:shared] if cached is not None else []
        new, new_roles = [], []
        for index in range(shared, len(turns)):
            turn_ids, roles = self._turn(turns[index], tools if index == 0 else None, state)
            new.append(turn_ids)
            new_roles.append(roles)
            json.append(orjson.dumps(turn_ids)[1:-1])
            ends.append((ends[-1] if ends else 0) + len(turn_ids))
            unknown = int(len(roles) > 0 and roles[0] == TokenRole.UNKNOWN)  # an unplaced turn is UNKNOWN throughout
            unplaced.append((unplaced[-1] if unplaced else 0) + unknown)
        ids = np.concatenate((known, np.array([*chain.from_iterable(new), *self.generation_prompt], IDS)))
        roles = np.concatenate((known_roles, *new_roles, self._generation_roles))
        ids.flags.writeable = roles.flags.writeable = False  # ``flat`` is a view of it, kept for the next turn
        end = len(ids) - len(self.generation_prompt)
        flat, flat_roles = ids[:end], roles[:end]
        _store(state, Conversation(tools, list(messages), turns, json, flat, ends, flat_roles, unplaced))
        return RenderedPrompt(ids, _json_array([*json, self._generation_json]), roles, unplaced[-1] if unplaced else 0)

    def _turn(self, turn: list[dict], tools: list[dict] | None, state: RolloutText) -> tuple[list[int], np.ndarray]:
        """A turn's ids and their roles: the exact sampled ids of an assistant turn sent back, else the
        turn rendered and tokenized."""
        message = turn[0]
        if message.get("role") == "assistant" and not tools:
            sampled = state.sampled.get(fingerprint(message))
            if sampled is not None:
                return self.spliced(sampled), self._spliced_roles(sampled)
        rendered = self.text.template.render([for_template(m) for m in turn], tools)
        encoding = self.text.encoding(rendered)
        return encoding.ids, self.roles.of(turn, tools, rendered, encoding)

    def spliced(self, sampled: list[int]) -> list[int]:
        closed = sampled if sampled and sampled[-1] == self.text.eos_id else [*sampled, self.text.eos_id]
        return [*self.generation_prompt, *closed, *self._after_eos]

    def _spliced_roles(self, sampled: list[int]) -> np.ndarray:
        """The header and the glue after the end of turn are the template's, the sampled ids the model's
        (an end of turn the model did not sample, closing a truncated turn, is the template's too)."""
        closing = 0 if sampled and sampled[-1] == self.text.eos_id else 1
        return np.concatenate(
            (
                self._generation_roles,
                filled(TokenRole.ASSISTANT, len(sampled)),
                filled(TokenRole.TEMPLATE, closing + len(self._after_eos)),
            )
        )


def _json_array(items: list[bytes]) -> tuple[bytes, ...]:
    """Parts that join to the JSON array of ``items`` (each a JSON list's inside, empty ones skipped)."""
    parts = [b"[", *chain.from_iterable(zip(filter(None, items), repeat(b",")))]
    parts[-1] = b"]" if len(parts) > 1 else b"[]"
    return tuple(parts)


def _turns(
    conversations: list[Conversation], messages: list[dict], tools: list[dict] | None
) -> tuple[list[list[dict]], Conversation | None, int]:
    """The request's turns, the cached conversation sharing the most leading turns with them, and how
    many it shares. A conversation whose messages the request repeats (the very objects) lends its
    turns, so only the new messages are looked at (the checks run in C, not a Python loop a message)."""
    best, best_len = None, -1
    for conversation in conversations:
        known = conversation.messages
        if len(known) > len(messages) or conversation.tools != tools or not all(map(is_, known, messages)):
            continue
        if len(conversation.turns) > best_len:
            best, best_len = conversation, len(conversation.turns)
    if best is None:
        turns = split_turns(messages)
        return (turns, *_best_match(conversations, turns, tools))
    turns = split_turns(messages[len(best.messages) :], list(best.turns))
    shared = best_len - (1 if best_len and turns[best_len - 1] is not best.turns[-1] else 0)  # a joined turn is new
    return turns, best, shared


def _best_match(
    conversations: list[Conversation], turns: list[list[dict]], tools: list[dict] | None
) -> tuple[Conversation | None, int]:
    """The cached conversation sharing the most leading turns with ``turns``, and how many it shares."""
    best, best_len = None, 0
    for conversation in conversations:
        if conversation.tools != tools:
            continue
        shared = 0
        for mine, theirs in zip(conversation.turns, turns):
            if mine != theirs:
                break
            shared += 1
        if shared > best_len:
            best, best_len = conversation, shared
    return best, best_len


def _store(state: RolloutText, conversation: Conversation) -> None:
    """Keep the newest conversations; one extending a cached one replaces it."""
    kept = [
        c
        for c in state.conversations
        if not (len(c.turns) <= len(conversation.turns) and c.turns == conversation.turns[: len(c.turns)])
    ]
    state.conversations = [conversation, *kept][:CONVERSATIONS_PER_ROLLOUT]
