"""413 before parsing: declared or streamed bodies over the limit never reach the app."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from raygang.server.limits import BodyLimit


async def echo_size(request: Request) -> JSONResponse:
    return JSONResponse({"size": len(await request.body())})


def client(limit: int) -> TestClient:
    app = Starlette(routes=[Route("/", echo_size, methods=["POST"])])
    return TestClient(BodyLimit(app, max_bytes=limit))


def test_bodies_within_the_limit_pass():
    assert client(100).post("/", content=b"x" * 100).json() == {"size": 100}


def test_a_declared_length_over_the_limit_is_refused_at_once():
    response = client(100).post("/", content=b"x" * 101)
    assert response.status_code == 413
    assert response.json() == {"detail": "request body over 100 bytes"}


def test_a_streamed_body_is_counted_as_it_arrives():
    def chunks():
        for _ in range(10):
            yield b"x" * 50

    response = client(100).post("/", content=chunks())  # chunked: no Content-Length
    assert response.status_code == 413


def test_a_bad_content_length_is_400():
    response = client(100).post("/", content=b"x", headers={"Content-Length": "lots"})
    assert response.status_code == 400
