"""Secrets and credentials in live sessions, found before a session may ever train.

A person's everyday agent sees their files, shells and tokens. Every ended session is scanned (``harnessrl
keys scan``) with detect-secrets' detectors for known credential formats (AWS, GitHub, GitLab, Slack,
Stripe, private keys, JWTs, passwords in assignments, ...) plus the user's own patterns; a session with
any finding is excluded from training and redacted (``store.live_keys.mark_scanned``): its bodies and
token ids are gone, and only the kinds of what was found are kept, never a value. detect-secrets'
entropy detectors are left out: on single lines of prose they flag ordinary words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.core.scan import scan_line
from detect_secrets.settings import transient_settings

from store.store import Store

PAGE = 200  # calls read at a time


@dataclass(frozen=True)
class SessionScan:
    rollout_id: int
    calls: int
    findings: tuple[str, ...]  # kinds, e.g. "AWS Access Key", "pattern 1"; never the secret


def detectors() -> list[dict]:
    names = sorted(c.__name__ for c in get_mapping_from_secret_type_to_class().values())
    return [{"name": name} for name in names if "Entropy" not in name]


def strings_in(value) -> Iterator[str]:
    """Every string of a JSON value (keys included): messages, tool arguments, outputs."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def findings_in(texts: Iterable[str], patterns: Sequence[re.Pattern[str]] = ()) -> list[str]:
    """The kinds of secret in ``texts``: detect-secrets' types and ``pattern N`` for the user's own."""
    found: set[str] = set()
    with transient_settings({"plugins_used": detectors()}):
        for text in texts:
            for number, pattern in enumerate(patterns, start=1):
                if pattern.search(text):
                    found.add(f"pattern {number}")
            for line in text.splitlines():
                found.update(secret.type for secret in scan_line(line))
    return sorted(found)


async def scan_sessions(store: Store, run: str, patterns: Sequence[re.Pattern[str]] = ()) -> list[SessionScan]:
    """Scan every ended, unscanned session of ``run``; redact the ones with findings, and then scrub the
    database's files of what was redacted (``store.scrub``)."""
    scans = []
    for rollout_id, session_name in await store.live_keys.unscanned(run):
        texts, calls, after = [session_name or ""], 0, 0
        while page := await store.calls.page(rollout_id, after, PAGE):
            for call in page:
                texts += [*strings_in(call.request), *strings_in(call.response)]
            calls, after = calls + len(page), page[-1].id
        findings = findings_in(texts, patterns)
        await store.live_keys.mark_scanned(rollout_id, findings)
        scans.append(SessionScan(rollout_id, calls, tuple(findings)))
    if any(scan.findings for scan in scans):
        await store.scrub()
    return scans
