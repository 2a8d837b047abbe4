#!/usr/bin/env python3
"""A minimal backend written the way the reference's Python backends are (backend/python/<name>/backend.py).

It imports `backend_pb2` / `backend_pb2_grpc` generated from backend.proto next to it, serves
`--addr HOST:PORT` with a thread-pool gRPC server, checks `LOCALAI_GRPC_AUTH_TOKEN` as a bearer
token, and uses a package (`refdep`) that exists only in its own venv. corral's worker runs it
through `run.sh`, unmodified.
"""

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent import futures
from types import FrameType
from typing import Any

import backend_pb2
import backend_pb2_grpc
import grpc
import refdep

MAX_WORKERS = int(os.environ.get("PYTHON_GRPC_MAX_WORKERS", "1"))


class TokenAuth(grpc.ServerInterceptor):  # type: ignore[misc]  # grpc ships no types
    def __init__(self, token: str) -> None:
        self.expected = "Bearer " + token

        def deny(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid token")

        self.denied = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: grpc.HandlerCallDetails
    ) -> Any:
        metadata = dict(handler_call_details.invocation_metadata or ())
        if metadata.get("authorization") != self.expected:
            return self.denied
        return continuation(handler_call_details)


class BackendServicer(backend_pb2_grpc.BackendServicer):  # type: ignore[misc]  # generated beside this file
    def __init__(self) -> None:
        self.model: str | None = None

    def Health(self, request: Any, context: grpc.ServicerContext) -> Any:
        return backend_pb2.Reply(message=bytes("OK", "utf-8"))

    def LoadModel(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.model = request.Model or "ref"
        return backend_pb2.Result(message="Model loaded successfully", success=True)

    def Free(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.model = None
        return backend_pb2.Result(message="freed", success=True)

    def Predict(self, request: Any, context: grpc.ServicerContext) -> Any:
        text = refdep.answer(request.Prompt or "")
        return backend_pb2.Reply(message=bytes(text, "utf-8"), tokens=len(text.split()), prompt_tokens=1)

    def PredictStream(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        text = refdep.answer(request.Prompt or "")
        for word in text.split(" "):
            yield backend_pb2.Reply(message=bytes(word + " ", "utf-8"))
        yield backend_pb2.Reply(message=b"", tokens=len(text.split()), prompt_tokens=1)

    def Embedding(self, request: Any, context: grpc.ServicerContext) -> Any:
        vector = refdep.embed(request.Embeddings or request.Prompt or "")
        return backend_pb2.EmbeddingResult(embeddings=vector)


def serve(address: str) -> None:
    token = os.environ.get("LOCALAI_GRPC_AUTH_TOKEN", "")
    interceptors = [TokenAuth(token)] if token else []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=MAX_WORKERS), interceptors=interceptors)
    backend_pb2_grpc.add_BackendServicer_to_server(BackendServicer(), server)
    server.add_insecure_port(address)
    server.start()
    print("Server started. Listening on: " + address, file=sys.stderr)

    def stop(sig: int, frame: FrameType | None) -> None:
        server.stop(5)
        sys.exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    server.wait_for_termination()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run the gRPC server.")
    parser.add_argument("--addr", default="localhost:50051", help="The address to bind the server to.")
    args = parser.parse_args()
    serve(args.addr)
