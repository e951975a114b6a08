"""The fuzz tier: property-based requests over the REST OpenAPI document (with the admin key) and over
the three model dialects, on the gateway in process with the fake engine. Bounded in examples (and
so in time: well under a minute each); deterministic (derandomized), so a failure reproduces."""

from __future__ import annotations

import pytest
from schemathesis.python import asgi

from gateway.app import create_app
from tests.builders import ADMIN_HEADERS, gateway_settings
from tests.unit.fuzzing import FUZZ_HOST, dialect_schema, fuzz, lifespan_of, rest_schema, rollout_routes_schema

REST_EXAMPLES = 25  # per operation
DIALECT_EXAMPLES = 60
TOKEN_EXAMPLES = 40  # per operation


@pytest.fixture
def fuzz_settings(sqlite_db, fake_engine, fake_engine_server):
    fake_engine.max_model_len = 100_000
    return gateway_settings(
        sqlite_db, fake_engine_server.url, allowed_hosts=(FUZZ_HOST,), require_token=True, max_body_bytes=256 * 1024
    )


def test_rest_api_fuzzed_has_no_server_errors_and_answers_in_its_documented_shapes(fuzz_settings):
    app = create_app(fuzz_settings)
    with lifespan_of(app):
        schema = rest_schema(app, ADMIN_HEADERS)
        operations = [result.ok().path for result in schema.get_all_operations()]
        assert "/api/rollouts" in operations and "/admin/adapters" in operations
        sent = fuzz(schema, fuzz_settings.database_url, ADMIN_HEADERS, REST_EXAMPLES)
    assert sent >= len(operations)


def test_model_dialects_fuzzed_have_no_server_errors_and_answer_in_their_shapes(fuzz_settings):
    app = create_app(fuzz_settings)
    with lifespan_of(app):
        rollout = _new_rollout(app)  # the dialects are fuzzed as a training agent reaches them: its token
        schema = dialect_schema(app, f"/r/{rollout['token']}/v1")
        statuses: list[int] = []
        fuzz(
            schema,
            fuzz_settings.database_url,
            {},
            DIALECT_EXAMPLES,
            on_case=lambda case, response: statuses.append(response.status_code),
        )
    assert 200 in statuses and any(400 <= s < 500 for s in statuses)  # both answers and refusals were seen


def test_rollout_token_routes_fuzzed_have_no_server_errors_beside_a_running_rollouts_token(fuzz_settings):
    """Each case names a token of its own in the path (any text: non-ASCII, another prefix) while the API key
    is a running rollout's token, as an agent holding one may send: a 401 in the route's shape, never a 5xx."""
    app = create_app(fuzz_settings)
    with lifespan_of(app):
        headers = {"authorization": f"Bearer {_new_rollout(app)['token']}"}
        schema = rollout_routes_schema(app, headers)
        operations = {result.ok().path for result in schema.get_all_operations()}
        assert len(operations) == 6 and "/r/{token}/v1/models" in operations, operations
        statuses: list[int] = []
        fuzz(
            schema,
            fuzz_settings.database_url,
            headers,
            TOKEN_EXAMPLES,
            on_case=lambda case, response: statuses.append(response.status_code),
        )
    assert 401 in statuses


def _new_rollout(app) -> dict:
    with asgi.get_client(app) as client:
        response = client.post("/api/rollouts", json={"run": "fuzz", "task": "t"}, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    return response.json()
