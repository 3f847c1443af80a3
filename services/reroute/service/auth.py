"""Bearer tokens with two roles, checked before anything else looks at a request.

``read`` may GET everything; ``operator`` may also POST and DELETE. A missing or unknown
token is 401 (with ``WWW-Authenticate: Bearer``), a read token on a mutating method 403.
The check is an ASGI middleware, so a caller without a token learns nothing else: not
even whether its body would have been valid. ``PUBLIC`` paths need no token, nor do the
web page's static files under ``PUBLIC_PREFIXES`` (they hold no data: the page sends the
operator's token with each API call it makes).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from enum import StrEnum

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

PUBLIC = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/ui"})
PUBLIC_PREFIXES = ("/ui/", "/docs/static/")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Role(StrEnum):
    READ = "read"
    OPERATOR = "operator"

    def allows(self, needed: Role) -> bool:
        """This role may do what ``needed`` may."""
        return self is Role.OPERATOR or needed is Role.READ


class TokenTable:
    """Token -> role; compared in constant time."""

    def __init__(self, tokens: Mapping[str, Role]) -> None:
        self._tokens = tuple((t.encode(), r) for t, r in tokens.items())

    def __len__(self) -> int:
        return len(self._tokens)

    def role_of(self, authorization: str | None) -> Role | None:
        """The role of a ``Bearer`` token header, or None when it is missing or unknown."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = token.strip().encode("utf-8", "replace")
        found = None
        for known, role in self._tokens:
            if hmac.compare_digest(known, given):
                found = role
        return found


def is_public(path: str) -> bool:
    """``path`` needs no token."""
    return path in PUBLIC or path.startswith(PUBLIC_PREFIXES)


def needed_role(method: str) -> Role:
    """The role an HTTP ``method`` needs."""
    return Role.READ if method in READ_METHODS else Role.OPERATOR


class BearerAuth:
    """ASGI middleware: every HTTP request outside ``PUBLIC`` needs a token of enough role."""

    def __init__(self, app: ASGIApp, tokens: TokenTable) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        role = self.tokens.role_of(Headers(scope=scope).get("authorization"))
        if role is None:
            await _refuse(401, "missing or unknown bearer token")(scope, receive, send)
        elif not role.allows(needed_role(scope["method"])):
            await _refuse(403, f"a {role} token may not {scope['method']}")(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def _refuse(status: int, detail: str) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="reroute"'} if status == 401 else None
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)
