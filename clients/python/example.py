#!/usr/bin/python3
"""session-ledger from Python: create a session, prompt with a file, print the streamed events.

Uses only the standard library, grpcio and protobuf (Debian: python3-grpcio, python3-protobuf)
and the modules generate.sh writes into gen/ (or $LEDGER_PY_GEN).

    ./generate.sh
    node bin/ledger.js serve --port 7411 &            # prints: session-ledger listening on http://127.0.0.1:7411
    /usr/bin/python3 clients/python/example.py --url 127.0.0.1:7411 --file package.json

Prints one line per event, `seq kind summary`. Exit codes: 0 done, 1 the RPC failed (code,
message and the google.rpc.ErrorInfo / BadRequest details are printed on stderr) or the reply
ended with an error, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, os.environ.get("LEDGER_PY_GEN") or str(HERE / "gen"))

try:
    import grpc
    from google.rpc import error_details_pb2, status_pb2
    from ledger.v1 import event_pb2, part_pb2, service_pb2, service_pb2_grpc
except ImportError as error:  # pragma: no cover - setup problem
    sys.exit(
        f"example.py: {error}\n"
        "  install the runtime:  apt-get install python3-grpcio python3-protobuf\n"
        "  and generate gen/:     clients/python/generate.sh"
    )

DEFAULT_FILE = HERE.parent.parent / "package.json"


def main() -> int:
    parser = argparse.ArgumentParser(description="Create a session, prompt with a file, print the streamed events.")
    parser.add_argument("--url", default=os.environ.get("LEDGER_ADDR", "127.0.0.1:7411"),
                        help="server address host:port (http:// is accepted); default $LEDGER_ADDR or 127.0.0.1:7411")
    parser.add_argument("--file", default=str(DEFAULT_FILE), help="file to attach (sent as a file: URL); default: the repo's package.json")
    parser.add_argument("--dir", default=os.getcwd(), help="session directory on the server; default: the current directory")
    parser.add_argument("--text", default="explain this file", help="the prompt text")
    parser.add_argument("--no-reply", action="store_true",
                        help="store the message without asking a model (the default when the server lists no models)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the whole stream (default 300)")
    args = parser.parse_args()

    target = args.url.removeprefix("http://").rstrip("/")
    if not target or "://" in target or "/" in target:
        parser.error(f"--url must be host:port (or http://host:port), got {args.url!r}")
    metadata = []
    if os.environ.get("LEDGER_TOKEN"):
        metadata.append(("authorization", f"Bearer {os.environ['LEDGER_TOKEN']}"))

    file_path = pathlib.Path(args.file).resolve()
    mime = mimetypes.guess_type(file_path.name)[0] or "text/plain"  # the server sniffs file: URLs anyway

    # One stored message may pass grpcio's default 4 MiB receive limit (large files, many
    # parts): accept up to the server's request_bytes (32 MiB by default).
    options = [("grpc.max_receive_message_length", 32 * 1024 * 1024)]
    with grpc.insecure_channel(target, options=options) as channel:
        stub = service_pb2_grpc.SessionServiceStub(channel)
        try:
            no_reply = args.no_reply
            if not no_reply:
                models = stub.ListModels(service_pb2.ListModelsRequest(), metadata=metadata, timeout=30)
                if not models.models:
                    print("note: the server has no model configured; storing the prompt with --no-reply", file=sys.stderr)
                    no_reply = True

            session = stub.CreateSession(service_pb2.CreateSessionRequest(directory=args.dir), metadata=metadata, timeout=30).session
            print(f"session {session.id} {session.directory}")

            request = service_pb2.PromptStreamRequest(
                session_id=session.id,
                no_reply=no_reply,
                parts=[
                    part_pb2.PartInput(text=part_pb2.TextPartInput(text=args.text)),
                    part_pb2.PartInput(file=part_pb2.FilePartInput(mime=mime, filename=file_path.name, url=file_path.as_uri())),
                ],
            )
            failed = False
            for response in stub.PromptStream(request, metadata=metadata, timeout=args.timeout):
                event = response.event
                print(f"{event.seq} {event.WhichOneof('kind')} {summary(event)}".rstrip(), flush=True)
                failed = failed or is_failure(event)
            return 1 if failed else 0
        except grpc.RpcError as error:
            report(error)
            return 1


def summary(event: event_pb2.SessionEvent) -> str:
    """A one-line description of an event."""
    kind = event.WhichOneof("kind")
    value = getattr(event, kind) if kind else None
    if kind == "message_updated":
        return describe_message(value.message)
    if kind == "part_updated":
        return describe_part(value.part)
    if kind == "part_delta":
        return f"{value.part_id} {value.field}@{value.offset} +{json.dumps(value.delta, ensure_ascii=False)}"
    if kind == "part_removed":
        return f"{value.message_id} {value.part_id}"
    if kind == "message_removed":
        return value.message_id
    if kind in ("session_updated", "session_deleted"):
        return f"{value.session.id} {json.dumps(value.session.title, ensure_ascii=False)} messages={value.session.message_count}"
    if kind == "session_status":
        status = value.WhichOneof("status") or "idle"
        if status == "retry":
            return f"retry attempt={value.retry.attempt} {value.retry.message}"
        return status
    if kind == "session_error":
        return f"{value.message_id or '-'} {value.error.WhichOneof('kind') or 'error'}: {value.error.message}"
    if kind == "agent_switched":
        return f"{value.previous or '(none)'} -> {value.current}"
    if kind == "model_switched":
        return f"{model_name(value.previous) if value.HasField('previous') else '(none)'} -> {model_name(value.current)}"
    if kind == "prompted":
        return f"{value.message_id} no_reply={str(value.no_reply).lower()}"
    if kind == "synthetic":
        return f"{value.message_id} {' '.join(value.part_ids)}"
    return str(value).replace("\n", " ").strip() if value is not None else ""


def describe_message(message) -> str:
    role = message.WhichOneof("kind")
    if role == "user":
        user = message.user
        model = model_name(user.model) if user.HasField("model") else "(none)"
        return f"{user.id} user agent={user.agent} model={model} no_reply={str(user.no_reply).lower()}"
    if role == "assistant":
        reply = message.assistant
        text = f"{reply.id} assistant agent={reply.agent} model={model_name(reply.model)}"
        if reply.finish:
            text += f" finish={reply.finish}"
        if reply.HasField("tokens"):
            text += f" tokens={reply.tokens.input}/{reply.tokens.output}"
        if reply.HasField("error"):
            text += f" error={reply.error.WhichOneof('kind') or 'error'}: {reply.error.message}"
        return text
    return "(empty message)"


def describe_part(part) -> str:
    kind = part.WhichOneof("kind")
    head = f"{part.id} {kind}"
    if kind == "text":
        flag = "[synthetic] " if part.text.synthetic else ""
        return f"{head} {flag}{first_line(part.text.text)}"
    if kind == "reasoning":
        return f"{head} {first_line(part.reasoning.text)}"
    if kind == "file":
        return f"{head} {part.file.mime} {part.file.filename} {abbreviate(part.file.url, 100)}"
    if kind == "tool":
        return f"{head} {part.tool.tool} {part.tool.state.WhichOneof('status') or 'pending'}"
    if kind == "step_finish":
        tokens = part.step_finish.tokens
        return f"{head} reason={part.step_finish.reason} tokens={tokens.input}/{tokens.output}"
    if kind == "agent":
        return f"{head} @{part.agent.name}"
    if kind == "subtask":
        return f"{head} {part.subtask.agent}: {first_line(part.subtask.prompt)}"
    if kind == "retry":
        return f"{head} attempt={part.retry.attempt} {part.retry.error.message}"
    return head


def is_failure(event: event_pb2.SessionEvent) -> bool:
    """An assistant message that ended with an error."""
    if event.WhichOneof("kind") != "message_updated":
        return False
    message = event.message_updated.message
    return message.WhichOneof("kind") == "assistant" and message.assistant.HasField("error") and message.assistant.HasField("time") and message.assistant.time.HasField("completed")


def model_name(ref) -> str:
    return f"{ref.provider_id}/{ref.model_id}" if ref.provider_id else "(none)"


def first_line(text: str, limit: int = 160) -> str:
    lines = text.splitlines() or [""]
    line = abbreviate(lines[0], limit)
    return f"{line} … (+{len(lines) - 1} lines)" if len(lines) > 1 else line


def abbreviate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def report(error: grpc.RpcError) -> None:
    """Prints the status code, the message and the google.rpc details of a failed call on stderr."""
    code = error.code() if hasattr(error, "code") else None
    message = error.details() if hasattr(error, "details") else str(error)
    print(f"error: {code.name if code else 'UNKNOWN'}: {message}", file=sys.stderr)
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                extra = " ".join(f"{k}={v}" for k, v in sorted(info.metadata.items()))
                print(f"  ErrorInfo reason={info.reason} domain={info.domain} {extra}".rstrip(), file=sys.stderr)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                for violation in bad.field_violations:
                    print(f"  BadRequest field={violation.field}: {violation.description}", file=sys.stderr)
            else:
                print(f"  detail {detail.type_url}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
