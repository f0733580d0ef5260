"""Users: who may call AdminService, with which role, and the rules that follow from identity.

A user is a name (what `spec.user` of their jobs says, and what DRF shares between) and a
role: `user` (submit; see nodes and status; list, describe, tail and cancel their own jobs)
or `admin` (everything). Three ways to be one (auth.py finds which):

* a user token an admin issued (`synergy admin users add`), kept only as its SHA-256 and
  compared in constant time against every stored digest; the state dir's admin.token is
  the token of the built-in admin user `admin` (the upgrade path from one shared token);
* the Unix socket: the kernel's peer credentials give the uid, whose Unix name is the user
  (no entry needed: the head node's accounts are the users; root and the daemon's own uid
  are admins, an entry may make others admins);
* a client certificate on the mutual-TLS port whose subject CN names an added user.

A revoked user is refused on every path from the next call on. Users live in the state
store (table `users`), so they survive restarts, backups and restores.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from synergy.scheduler.daemon.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied
from synergy.scheduler.daemon.records import JobRecord
from synergy.scheduler.jobspec import SpecError, rules
from synergy.scheduler.model import Resources

USER, ADMIN = "user", "admin"
ROLES = (USER, ADMIN)
#: The built-in admin whose token is STATE_DIR/admin.token.
BUILTIN_ADMIN = "admin"


def token_hash(token: str) -> str:
    """What is stored of a user token. Tokens are 256 random bits, so a plain SHA-256 is
    enough (no salt or slow hash: there is nothing to guess)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class UserRecord:
    name: str
    role: str
    #: SHA-256 of the user's token ("" = none: socket or certificate only).
    token_sha256: str = ""
    created_at: float = 0.0
    created_by: str = ""
    #: When and by whom the user was revoked (0 = active).
    revoked_at: float = 0.0
    revoked_by: str = ""

    @property
    def active(self) -> bool:
        return not self.revoked_at


def user_to_dict(user: UserRecord) -> dict[str, Any]:
    return {k: getattr(user, k) for k in UserRecord.__dataclass_fields__}


def user_from_dict(d: Mapping[str, Any]) -> UserRecord:
    return UserRecord(**{k: v for k, v in d.items() if k in UserRecord.__dataclass_fields__})


@dataclass(frozen=True)
class Caller:
    """Who makes a call, as authenticated: the user's name, role, and how it was learnt."""

    name: str
    role: str
    via: str

    @property
    def admin(self) -> bool:
        return self.role == ADMIN

    def __str__(self) -> str:
        return f"{self.name} ({self.role}, {self.via})"


def user_name(value: str, field: str = "name") -> str:
    """A user name: the rule of `spec.user`, and not empty."""
    if not value:
        raise InvalidArgument(field, "must not be empty")
    try:
        return rules.user_name(value, field)
    except SpecError as exc:
        raise InvalidArgument(exc.field, exc.problem) from None


def job_owner(spec_user: str, caller: Caller) -> str:
    """The user a job submitted by `caller` belongs to: the caller, or (admins only) the user
    the spec names. Anyone else naming another user is refused, naming the field."""
    if not spec_user or spec_user == caller.name:
        return caller.name
    if not caller.admin:
        raise PermissionDenied(
            f"spec.user: {caller.name} may not submit as {spec_user!r}; leave it empty (your jobs are "
            f"{caller.name}'s) or ask an admin to submit on that user's behalf"
        )
    return spec_user


def unix_user(job_user: str) -> str:
    """Who a job runs as on the node ('' = the agent's --default-user). The built-in admin is
    synergyd's admin.token, not a person with a login, so its own jobs run as the default user
    rather than failing on every node that has no Unix user called `admin`."""
    return "" if job_user == BUILTIN_ADMIN else job_user


def may_act_on(caller: Caller, job_user: str) -> bool:
    return caller.admin or job_user == caller.name


def check_owner(caller: Caller, job_id: int, job_user: str) -> None:
    """PermissionDenied naming the job when `caller` may not see or touch another user's job."""
    if not may_act_on(caller, job_user):
        raise PermissionDenied(f"job {job_id} belongs to another user; {caller.name} may act only on their own jobs")


@dataclass
class UserUsage:
    """What one user's jobs hold and wait for now (`synergy status`, /metrics)."""

    user: str
    running: int = 0
    waiting: int = 0
    allocated: Resources = field(default_factory=Resources)


def usage_by_user(jobs: Iterable[JobRecord]) -> dict[str, UserUsage]:
    """Per `spec.user` (the authenticated submitter; "" for jobs from before users), over the
    jobs that have not ended: placed ones and what they hold (a packed job's GPUs are its
    host's, counted once), and the rest as waiting. Ordered by user."""
    out: dict[str, UserUsage] = {}
    for job in jobs:
        if job.state.terminal:
            continue
        u = out.setdefault(job.spec.user, UserUsage(job.spec.user))
        if job.placed:
            u.running += 1
            for node in dict.fromkeys(p.server_id for p in job.placements):
                u.allocated = u.allocated + job.held_on(node)
        else:
            u.waiting += 1
    return dict(sorted(out.items()))


class UserBook:
    """The users, in the state store; reads are lock-free (the auth guard runs on the event
    loop): `_by_name` is replaced whole on every change, never mutated."""

    def __init__(self, store: Any, clock: Any) -> None:
        self._store = store
        self._clock = clock
        self._by_name: dict[str, UserRecord] = {u.name: u for u in store.users()}

    def get(self, name: str) -> UserRecord | None:
        return self._by_name.get(name)

    def list(self) -> list[UserRecord]:
        return sorted(self._by_name.values(), key=lambda u: u.name)

    def by_token(self, token: str) -> UserRecord | None:
        """The active user whose token this is. Every stored digest is compared, in constant
        time, whatever matches: the time taken says nothing about the token."""
        digest = token_hash(token).encode()
        found = None
        for user in self._by_name.values():
            if user.token_sha256 and hmac.compare_digest(digest, user.token_sha256.encode()):
                found = user
        return found if found is not None and found.active else None

    def add(self, name: str, role: str, by: str, token: bool = True) -> tuple[UserRecord, str]:
        """A new (or re-enabled revoked) user and their token ("" without one)."""
        name = user_name(name)
        if role not in ROLES:
            raise InvalidArgument("role", f"must be {' or '.join(ROLES)}, got {role!r}")
        old = self._by_name.get(name)
        if old is not None and old.active:
            raise AlreadyExists(
                f"name: user {name!r} exists ({old.role}); revoke it first to issue a new token or change the role"
            )
        secret = secrets.token_urlsafe(32) if token else ""
        user = UserRecord(name, role, token_hash(secret) if secret else "", self._clock.now(), by)
        self._save(user)
        return user, secret

    def revoke(self, name: str, by: str) -> UserRecord:
        user = self._by_name.get(user_name(name))
        if user is None:
            raise NotFound(f"no user named {name!r} (see 'synergy admin users list')")
        if not user.active:
            return user
        user = replace(user, revoked_at=self._clock.now(), revoked_by=by)
        self._save(user)
        return user

    def ensure_builtin_admin(self, admin_token: str) -> str:
        """The upgrade path: the admin.token file is the token of the admin user `admin`
        (created on the first start of this version; its digest follows the file). Returns
        what changed, for the log ("" = nothing)."""
        digest = token_hash(admin_token)
        old = self._by_name.get(BUILTIN_ADMIN)
        if old is None:
            self._save(UserRecord(BUILTIN_ADMIN, ADMIN, digest, self._clock.now(), "synergyd (admin.token)"))
            return "created the admin user 'admin', whose token is admin.token"
        if old.token_sha256 != digest:
            self._save(replace(old, token_sha256=digest))
            return "admin.token changed: it is now the token of the user 'admin'"
        return ""

    def _save(self, user: UserRecord) -> None:
        self._store.save_user(user)
        self._by_name = {**self._by_name, user.name: user}
