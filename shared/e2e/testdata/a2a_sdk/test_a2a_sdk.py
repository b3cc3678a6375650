"""The official A2A Python client (a2a-sdk 1.3.0) against a mesh agent.

Run by the Go test TestA2ASDK (shared/e2e/a2a_sdk_test.go), which boots the
local stack, runs bob's meshd with the conformance agent and writes the
scenario (card URL, client ids and secrets, a control URL that stops and
starts bob's meshd) to the file MESH_A2A_SCENARIO names. Between the card URL
and the calls there is no mesh-specific code: the card is resolved by the
SDK, the token fetched and renewed by Authlib's OAuth 2.0 client credentials
client at the token URL the card declares and attached by the SDK's own
AuthInterceptor for the card's oauth2 scheme, and every call made by the
SDK's client over the binding the test picks.
"""

import asyncio
import contextlib
import json
import os
import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor, CredentialService
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import A2AError, TaskNotCancelableError, UnsupportedOperationError
from authlib.integrations.httpx_client import AsyncOAuth2Client

# Every call and stream is bounded: a blocking SendMessage waits at most the
# gateway's 25 s.
A2A_CALL_TIMEOUT = 40.0

BINDINGS = ["JSONRPC", "HTTP+JSON"]

with open(os.environ["MESH_A2A_SCENARIO"], encoding="utf-8") as f:
    SCENARIO = json.load(f)


async def resolve_card(base):
    async with httpx.AsyncClient(timeout=A2A_CALL_TIMEOUT) as plain:
        return await A2ACardResolver(plain, base).get_agent_card()


def token_url(card):
    """The OAuth client credentials token URL the card declares."""
    for scheme in card.security_schemes.values():
        if scheme.HasField("oauth2_security_scheme"):
            flows = scheme.oauth2_security_scheme.flows
            if flows.HasField("client_credentials"):
                return flows.client_credentials.token_url
    raise AssertionError(f"the card declares no client credentials flow: {card.security_schemes}")


class ClientCredentials(CredentialService):
    """OAuth 2.0 client credentials (RFC 6749 §4.4) for the card's oauth2
    schemes, by Authlib, renewing the token before it expires. The SDK's
    AuthInterceptor asks it for each security requirement the card lists
    and sends the token as the bearer (a2a-sdk's transports call
    httpx.send, which bypasses Authlib's own AsyncOAuth2Client hooks)."""

    def __init__(self, card, who):
        self._oauth = AsyncOAuth2Client(
            client_id=who["client_id"],
            client_secret=who["secret"],
            token_endpoint=token_url(card),
            grant_type="client_credentials",
            timeout=A2A_CALL_TIMEOUT,
        )
        self._schemes = {n for n, s in card.security_schemes.items() if s.HasField("oauth2_security_scheme")}

    async def get_credentials(self, security_scheme_name, context):
        if security_scheme_name not in self._schemes:
            return None
        token = self._oauth.token
        if not token or token.is_expired(leeway=60):
            token = await self._oauth.fetch_token()
        return token["access_token"]

    async def aclose(self):
        await self._oauth.aclose()


@contextlib.asynccontextmanager
async def sdk_client(binding, who=None, card=None, streaming=False):
    """The SDK's client for bob's card (or card) over binding, as who."""
    card = card or await resolve_card(SCENARIO["target_base"])
    creds = ClientCredentials(card, who or SCENARIO["caller"])
    http = httpx.AsyncClient(timeout=A2A_CALL_TIMEOUT)
    try:
        config = ClientConfig(httpx_client=http, supported_protocol_bindings=[binding], streaming=streaming)
        yield ClientFactory(config).create(card, interceptors=[AuthInterceptor(creds)])
    finally:
        await http.aclose()
        await creds.aclose()


def message(prefix, text="hello", task_id=None):
    msg = Message(message_id=f"{prefix}-{uuid.uuid4()}", role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        msg.task_id = task_id
    return msg


async def send(client, msg, return_immediately=False):
    """SendMessage (blocking unless return_immediately); the Task answered."""
    req = SendMessageRequest(message=msg, configuration=SendMessageConfiguration(return_immediately=return_immediately))
    async with asyncio.timeout(A2A_CALL_TIMEOUT):
        got = [ev async for ev in client.send_message(req)]
    assert len(got) == 1 and got[0].HasField("task"), f"want one Task, got {got}"
    return got[0].task


def texts(msg):
    return [p.text for p in msg.parts if p.text]


async def control(action):
    async with httpx.AsyncClient(timeout=A2A_CALL_TIMEOUT) as plain:
        (await plain.post(SCENARIO["control"] + "/target/" + action)).raise_for_status()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_blocking_send_completes_a_task_and_get_and_list_show_it(binding):
    async with sdk_client(binding) as client:
        task = await send(client, message("tck-complete-task"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
        assert "Hello from TCK" in texts(task.status.message), task.status
        async with asyncio.timeout(A2A_CALL_TIMEOUT):
            got = await client.get_task(GetTaskRequest(id=task.id, history_length=10))
        assert got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED
        assert any(m.role == Role.ROLE_USER for m in got.history), got.history
        async with asyncio.timeout(A2A_CALL_TIMEOUT):
            listed = await client.list_tasks(ListTasksRequest(page_size=50))
        assert task.id in [t.id for t in listed.tasks], listed


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_streamed_send_gives_the_task_first_and_ends_completed(binding):
    async with sdk_client(binding, streaming=True) as client:
        req = SendMessageRequest(message=message("tck-stream-001"))
        async with asyncio.timeout(A2A_CALL_TIMEOUT):
            events = [ev async for ev in client.send_message(req)]
        assert events and events[0].HasField("task"), events
        assert not any(ev.HasField("message") for ev in events), "a bare Message makes stock clients stop reading"
        last = events[-1]
        assert last.HasField("status_update") and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED, events
        assert any(ev.HasField("artifact_update") for ev in events), events


@pytest.mark.parametrize("binding", BINDINGS)
async def test_subscribing_to_a_completed_task_is_an_unsupported_operation(binding):
    async with sdk_client(binding) as sender, sdk_client(binding, streaming=True) as client:
        task = await send(sender, message("tck-complete-task"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
        with pytest.raises(UnsupportedOperationError):
            async with asyncio.timeout(A2A_CALL_TIMEOUT):
                got = [ev async for ev in client.subscribe(SubscribeToTaskRequest(id=task.id))]
                raise AssertionError(f"the subscription gave {got}, want UnsupportedOperation")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_input_required_task_is_canceled_and_then_not_cancelable(binding):
    async with sdk_client(binding) as client:
        task = await send(client, message("tck-input-required"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
        async with asyncio.timeout(A2A_CALL_TIMEOUT):
            canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED, canceled
        with pytest.raises(TaskNotCancelableError):
            async with asyncio.timeout(A2A_CALL_TIMEOUT):
                await client.cancel_task(CancelTaskRequest(id=task.id))


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_subscriber_of_a_task_sent_while_meshd_is_stopped_sees_it_complete_when_meshd_starts(binding):
    async with sdk_client(binding) as sender, sdk_client(binding, streaming=True) as client:
        await control("stop")
        try:
            task = await send(sender, message("tck-complete-task"), return_immediately=True)
            assert task.status.state == TaskState.TASK_STATE_SUBMITTED, task
            events = []
            async with asyncio.timeout(A2A_CALL_TIMEOUT):
                async for ev in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                    events.append(ev)
                    if len(events) == 1:
                        # The subscription is open: now the agent comes back.
                        assert ev.HasField("task") and ev.task.id == task.id, ev
                        await control("start")
        finally:
            await control("start")
        last = events[-1]
        assert last.HasField("status_update") and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED, events


def with_base(card, base):
    """A copy of bob's card addressed at base: how a stock client reaches
    an agent whose card answers 404 (an unpublished or nonexistent one)."""
    other = type(card)()
    other.CopyFrom(card)
    for iface in other.supported_interfaces:
        iface.url = iface.url.replace(SCENARIO["target_base"], base)
    return other


async def outcome(call):
    """The error class and message a call ends with (ids masked)."""
    try:
        async with asyncio.timeout(A2A_CALL_TIMEOUT):
            result = call()
            if hasattr(result, "__aiter__"):
                return ("events", [ev async for ev in result])
            return ("answer", await result)
    except A2AError as e:
        return (type(e).__name__, str(e).replace(SCENARIO["target_id"], "{agent}").replace(SCENARIO["unpublished_id"], "{agent}").replace(SCENARIO["nonexistent_id"], "{agent}"))


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_stranger_an_unpublished_card_and_a_nonexistent_agent_get_the_same_answers(binding):
    card = await resolve_card(SCENARIO["target_base"])
    task_id = SCENARIO["task_id"]  # a real task of alice's with bob
    cases = {
        "a stranger": (SCENARIO["stranger"], card),
        "an unpublished card": (SCENARIO["caller"], with_base(card, SCENARIO["unpublished_base"])),
        "a nonexistent agent": (SCENARIO["caller"], with_base(card, SCENARIO["nonexistent_base"])),
    }
    answers = {}
    mid = "same-" + str(uuid.uuid4())
    for name, (who, c) in cases.items():
        async with sdk_client(binding, who=who, card=c, streaming=True) as client:
            answers[name] = [
                await outcome(lambda: client.get_task(GetTaskRequest(id=task_id))),
                await outcome(lambda: client.list_tasks(ListTasksRequest())),
                await outcome(lambda: client.cancel_task(CancelTaskRequest(id=task_id))),
                await outcome(lambda: client.subscribe(SubscribeToTaskRequest(id=task_id))),
                await outcome(lambda: client.send_message(SendMessageRequest(message=Message(message_id=mid, role=Role.ROLE_USER, parts=[Part(text="hi")], task_id=task_id)))),
            ]
    first = answers["a stranger"]
    assert all(kind not in ("answer", "events") for kind, _ in first), first
    for name, got in answers.items():
        assert got == first, f"{name} answered {got}, a stranger {first}"


async def test_the_cards_of_an_unpublished_and_a_nonexistent_agent_are_the_same_404():
    async with httpx.AsyncClient(timeout=A2A_CALL_TIMEOUT) as plain:
        a = await plain.get(SCENARIO["unpublished_base"] + "/.well-known/agent-card.json")
        b = await plain.get(SCENARIO["nonexistent_base"] + "/.well-known/agent-card.json")
    assert a.status_code == b.status_code == 404
    assert a.text == b.text


async def test_a_revoked_key_gets_401_from_the_token_endpoint_and_with_its_old_token():
    card = await resolve_card(SCENARIO["target_base"])
    revoked = SCENARIO["revoked"]
    http = AsyncOAuth2Client(client_id=revoked["client_id"], client_secret=revoked["secret"],
                             token_endpoint=token_url(card), grant_type="client_credentials", timeout=A2A_CALL_TIMEOUT)
    async with http:
        with pytest.raises(Exception) as refused:
            await http.fetch_token()
        assert "invalid_client" in str(refused.value), refused.value
    for binding in BINDINGS:
        old = httpx.AsyncClient(headers={"Authorization": "Bearer " + revoked["token"]}, timeout=A2A_CALL_TIMEOUT)
        async with old:
            client = ClientFactory(ClientConfig(httpx_client=old, supported_protocol_bindings=[binding], streaming=False)).create(card)
            with pytest.raises(A2AError) as refused:
                async with asyncio.timeout(A2A_CALL_TIMEOUT):
                    await client.get_task(GetTaskRequest(id=SCENARIO["task_id"]))
            assert http_status(refused.value) == 401, f"{binding}: {refused.value!r}"


def http_status(err):
    """The HTTP status behind an SDK error (its cause chain)."""
    while err is not None:
        if isinstance(err, httpx.HTTPStatusError):
            return err.response.status_code
        err = err.__cause__
    return None
