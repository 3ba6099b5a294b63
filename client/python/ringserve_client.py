# SPDX-License-Identifier: MIT
"""ringserve client for Python 3, on Debian's python3-zmq and python3-msgpack.

Speaks ipc/PROTOCOL.md like the C library (client/client.h) and keeps the
same promises: one routing id with a DEALER to tokenizerd and one to
postprocd; hello -> welcome before the first generate; every delta reaches
the caller exactly once and in order (repeated sequence numbers are dropped,
a gap or a silent request is repaired with `resume`); a generate that was not
acknowledged is resent with the same bytes (tokenizerd deduplicates by
routing id and request id); a daemon that comes back is noticed through a
ZeroMQ socket monitor (tokenizerd: resend; postprocd: hello and resume); and
every request ends with exactly one final event. Memory is bounded: at most
`max_requests` in flight and nothing is buffered out of order.

    from ringserve_client import Client
    with Client() as c:
        for ev in c.stream("Once upon a time", max_tokens=64, temperature=0):
            print(ev.text, end="", flush=True)

Leaves out: tokenizing (the server does it) and retrying refused requests.
"""

import json
import os
import secrets
import time

import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

PROTOCOL_VERSION = 2

# Request fields (PROTOCOL.md 3.1) besides the prompt, with the Python types accepted.
PARAMS = {
    "max_tokens": int, "temperature": (int, float), "top_p": (int, float), "top_k": int,
    "min_p": (int, float), "repetition_penalty": (int, float),
    "presence_penalty": (int, float), "frequency_penalty": (int, float), "seed": int,
    "stop": list, "stop_token_ids": list, "ignore_eos": bool, "logprobs": int,
    "stream": bool, "priority": int,
    # with messages only (rendered by the model's chat template):
    "tools": list, "add_generation_prompt": bool, "chat_template_kwargs": dict,
    "constraint": dict, "logit_bias": dict, "allowed_token_ids": list, "min_tokens": int,
}

# Structured-output shorthands (ringserve-cli's flags): each becomes the "constraint" map.
CONSTRAINT_KINDS = ("grammar", "json_schema", "json_object", "regex", "choice")


def _constraint_params(params):
    """Folds grammar= / json_schema= (str or dict) / json_object=True / regex= / choice=[...]
    into the wire's "constraint" map; logit_bias keys become ints. One kind per request."""
    given = [k for k in CONSTRAINT_KINDS if params.get(k) not in (None, False)]
    if len(given) > 1 or (given and "constraint" in params):
        raise ValueError(f"one constraint per request, got {given}")
    for k in CONSTRAINT_KINDS:
        val = params.pop(k, None)
        if val in (None, False):
            continue
        if k == "json_schema" and isinstance(val, dict):
            val = json.dumps(val)
        if k == "json_object":
            params["constraint"] = {"kind": "json_object"}
        elif k == "choice":
            if not isinstance(val, (list, tuple)) or not all(isinstance(c, str) for c in val):
                raise TypeError("choice: a list of strings")
            params["constraint"] = {"kind": "choice", "choices": list(val)}
        elif not isinstance(val, str):
            raise TypeError(f"{k}: wrong type {type(val).__name__}")
        else:
            params["constraint"] = {"kind": "gbnf" if k == "grammar" else k, "text": val}
    if isinstance(params.get("logit_bias"), dict):
        params["logit_bias"] = {int(t): float(b) for t, b in params["logit_bias"].items()}
    return params

BACKOFF_MAX = 8.0  # seconds: resends and resumes back off to this
SERVER_MSG_MAX = 4 << 20


class RingserveError(Exception):
    """A request that did not end normally: `code` is the wire error code (or a local one)."""

    def __init__(self, request_id, code, message):
        super().__init__(f"request {request_id!r}: {code}: {message}")
        self.request_id, self.code, self.message = request_id, code, message


class Refused(RingserveError):
    """tokenizerd refused the generate (invalid_param, overloaded, ...)."""


class Timeout(RingserveError):
    """The request's time limit passed; a cancel was sent."""


class Lost(RingserveError):
    """postprocd no longer holds the request's output (resume answered not_found)."""


class Event:
    """One delta or the final of a request. `final` is True for the last one."""

    __slots__ = ("id", "seq", "text", "tokens", "logprobs", "final", "status",
                 "finish_reason", "usage", "timings", "error", "message", "recv_time",
                 "submit_time", "handle", "seed", "prompt_tokens")

    def __init__(self, req, final, msg=None, status="ok"):
        msg = msg or {}
        self.id, self.final, self.status = req.id, final, status
        self.seq = msg.get("seq", req.next_seq)
        self.text = msg.get("text", "")
        self.tokens = msg.get("tokens", [])
        self.logprobs = msg.get("logprobs")
        self.finish_reason = msg.get("finish_reason") if final else None
        self.usage = msg.get("usage") if final else None
        self.timings = msg.get("timings") if final else None
        self.error = msg.get("error")
        self.message = msg.get("message", "")
        self.recv_time = time.monotonic()
        self.submit_time = req.submit_time
        self.handle, self.seed, self.prompt_tokens = req.handle, req.seed, req.prompt_tokens

    def __repr__(self):
        kind = "final" if self.final else "delta"
        return f"<{kind} {self.id} seq={self.seq} text={self.text!r}>"


def default_rundir(instance="default"):
    """The daemons' default runtime directory (ipc/rundir.h rs_rundir_default)."""
    env = os.environ.get("RINGSERVE_RUNDIR")
    if env:
        return env
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg.startswith("/"):
        return f"{xdg}/ringserve-{instance}"
    return f"/tmp/ringserve-{os.getuid()}-{instance}"


def _load_key(path_or_key, secret=False):
    """A z85 key given directly, or read from a ringserve-keygen file (public/secret lines)."""
    if path_or_key is None:
        return None
    if len(path_or_key) == 40 and not os.path.exists(path_or_key):
        return path_or_key.encode()
    keys = {}
    with open(path_or_key) as f:
        for line in f:
            name, sep, value = line.partition("=")
            if sep and not line.lstrip().startswith("#"):
                keys[name.strip()] = value.strip().encode()
    want = "secret" if secret else "public"
    if want not in keys:
        raise ValueError(f"{path_or_key}: no '{want} = ...' line")
    return keys if secret else keys["public"]


class _Request:
    __slots__ = ("id", "callback", "body", "acked", "cancel_wanted", "resume_pending",
                 "submit_time", "deadline", "gen_due", "gen_ivl", "sent_once", "cancel_due",
                 "last_rx", "resume_time", "stall_ivl", "next_seq", "n_out", "handle", "seed",
                 "prompt_tokens")

    def __init__(self, rid, callback, body, now, timeout, ack_timeout, stall):
        self.id, self.callback, self.body = rid, callback, body
        self.acked = self.cancel_wanted = self.resume_pending = self.sent_once = False
        self.submit_time = now
        self.deadline = now + timeout if timeout else None
        self.gen_due, self.gen_ivl = now, ack_timeout
        self.cancel_due = None
        self.last_rx = self.resume_time = 0.0
        self.stall_ivl = stall
        self.next_seq = self.n_out = 0
        self.handle = self.seed = self.prompt_tokens = None


class Client:
    """One routing id, two DEALERs. Not thread-safe: use it from one thread."""

    def __init__(self, rundir=None, instance="default", tokenizerd=None, postprocd=None,
                 curve_secret_file=None, curve_server_key=None, curve_postprocd_key=None,
                 routing_id=None, ack_timeout=1.0, stall=1.0, timeout=600.0,
                 max_requests=1024, context=None, secret=None):
        rundir = rundir or default_rundir(instance)
        self.rid = routing_id or b"rsc-" + secrets.token_hex(12).encode()
        # The secret makes this client's requests its own (PROTOCOL.md 3.3); never logged.
        # Random per client unless the caller chose the routing id (then none: another
        # process of the same user may re-attach under it) or passes its own.
        if secret is None and routing_id is None:
            secret = secrets.token_hex(32)
        if secret is not None and not (16 <= len(secret) <= 128 and
                                       all(0x21 <= ord(ch) <= 0x7e for ch in secret)):
            raise ValueError("secret must be 16..128 printable ASCII characters")
        self._hello = {"v": PROTOCOL_VERSION, "type": "hello"}
        if secret is not None:
            self._hello["secret"] = secret
        if not 1 <= len(self.rid) <= 64 or self.rid[0] == 0:
            raise ValueError("routing id must be 1..64 bytes, first byte not zero")
        self.ack_timeout, self.stall, self.timeout = ack_timeout, stall, timeout
        self.max_requests = max_requests
        self.ctx = context or zmq.Context.instance()
        self.stats = dict.fromkeys(
            ("submitted", "acked", "finished", "gen_sent", "gen_resent", "deltas",
             "duplicates", "gaps", "resumes", "releases", "hellos", "reconnects", "cancels_sent",
             "timeouts", "strays", "malformed", "send_fail"), 0)
        self.requests = {}
        self.next_id = self.events = 0
        self.welcomed = False
        self.down = {"tok": False, "post": False}
        self.hello_due, self.hello_time, self.hello_ivl = time.monotonic(), 0.0, 0.02
        eps = {"tok": tokenizerd or f"ipc://{rundir}/tokenizerd.sock",
               "post": postprocd or f"ipc://{rundir}/postprocd.sock"}
        keys = {"tok": curve_server_key, "post": curve_postprocd_key or curve_server_key}
        self.sock, self.mon = {}, {}
        self.eps, self.unanswered = eps, 0
        for name in ("tok", "post"):
            self.sock[name] = self._dealer(eps[name], curve_secret_file, keys[name])
            self.mon[name] = self.sock[name].get_monitor_socket(
                zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        self.poller = zmq.Poller()
        for s in list(self.sock.values()) + list(self.mon.values()):
            self.poller.register(s, zmq.POLLIN)

    def _dealer(self, endpoint, secret_file, server_key):
        s = self.ctx.socket(zmq.DEALER)
        for opt, val in ((zmq.LINGER, 0), (zmq.SNDHWM, 1000), (zmq.RCVHWM, 10000),
                         (zmq.HEARTBEAT_IVL, 1000), (zmq.HEARTBEAT_TIMEOUT, 3000),
                         (zmq.HEARTBEAT_TTL, 3000), (zmq.IMMEDIATE, 1),
                         (zmq.RECONNECT_IVL, 50), (zmq.RECONNECT_IVL_MAX, 1000),
                         (zmq.MAXMSGSIZE, 2 * SERVER_MSG_MAX)):
            s.setsockopt(opt, val)
        s.setsockopt(zmq.ROUTING_ID, self.rid)
        if endpoint.startswith("tcp://"):
            if not secret_file or not server_key:
                raise ValueError(f"{endpoint}: tcp:// needs curve_secret_file and the server key")
            pair = _load_key(secret_file, secret=True)
            s.curve_publickey, s.curve_secretkey = pair["public"], pair["secret"]
            s.curve_serverkey = _load_key(server_key)
        s.connect(endpoint)
        return s

    # --- context manager ---------------------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes the sockets; requests in flight get no final (the server aborts them)."""
        for name in ("tok", "post"):
            if name in self.sock:
                self.sock[name].disable_monitor()
                self.mon[name].close(0)
                self.sock[name].close(0)
        self.sock, self.mon = {}, {}

    # --- sending -------------------------------------------------------------------------------

    def _send(self, name, msg):
        body = msg if isinstance(msg, bytes) else msgpack.packb(msg, use_bin_type=True)
        try:
            self.sock[name].send_multipart([b"", body], flags=zmq.NOBLOCK)
            return True
        except zmq.Again:  # not connected yet (IMMEDIATE) or at the high-water mark
            self.stats["send_fail"] += 1
            return False

    def _hello_tok(self):
        # Ahead of each generate/cancel on the same (ordered) connection: a reconnected or
        # restarted tokenizerd then knows this connection's owner before the request.
        return "secret" not in self._hello or self._send("tok", self._hello)

    def _send_hello(self, now):
        if self._send("post", self._hello):
            self.stats["hellos"] += 1
            self.hello_time = now
            self.unanswered += 1
            if self.unanswered >= 5:
                # The daemons ignore a connection made while they still held our previous
                # one under this routing id (no handover), for good: connect anew.
                self.unanswered = 0
                self.sock["post"].disconnect(self.eps["post"])
                self.sock["post"].connect(self.eps["post"])
        self.hello_due = now + self.hello_ivl
        self.hello_ivl = min(self.hello_ivl * 2, 1.0)

    def _send_generate(self, req, now):
        # Never a generate whose hello did not go out: it would be owned by the uid alone.
        if not self._hello_tok() or not self._send("tok", req.body):
            req.gen_due = now + 0.1
            return
        self.stats["gen_sent"] += 1
        if req.sent_once:
            self.stats["gen_resent"] += 1
        req.sent_once = True
        req.gen_due = now + req.gen_ivl
        req.gen_ivl = min(req.gen_ivl * 2, BACKOFF_MAX)

    def _send_cancel(self, req, now):
        sent = self._hello_tok() and self._send(
            "tok", {"v": PROTOCOL_VERSION, "type": "cancel", "id": req.id})
        self.stats["cancels_sent"] += sent
        req.cancel_due = now + (self.ack_timeout if sent else 0.1)

    def _send_release(self, req_id):
        """The final arrived: postprocd may free the request now instead of after its linger."""
        msg = {"v": PROTOCOL_VERSION, "type": "release", "id": req_id}
        self.stats["releases"] += self._send("post", msg)

    def _send_resume(self, req, now):
        msg = {"v": PROTOCOL_VERSION, "type": "resume", "id": req.id, "from_seq": req.next_seq}
        if self._send("post", msg):
            self.stats["resumes"] += 1
        req.resume_time = now

    # --- the public calls ----------------------------------------------------------------------

    def submit(self, prompt=None, prompt_ids=None, callback=None, id=None, timeout=None,
               messages=None, **params):
        """Submits a generate; callback(event) gets its events from poll(). Returns the id.

        Exactly one of prompt (str; "" = BOS alone), prompt_ids (list of ints) and messages
        (a conversation: list of {"role": ..., "content": ...} dicts, rendered by the server
        with the model's chat template; tools=, add_generation_prompt=,
        chat_template_kwargs= go with it) is given;
        params are the request fields of PROTOCOL.md 3.1 (max_tokens=..., temperature=...),
        plus the structured-output shorthands grammar=GBNF, json_schema=str|dict,
        json_object=True, regex=RE, choice=[...], logit_bias={id: bias}, allowed_token_ids=[...].
        timeout: seconds from now to the final (None: the client's; 0: none).
        """
        if sum(x is not None for x in (prompt, prompt_ids, messages)) != 1:
            raise ValueError("give exactly one of prompt, prompt_ids and messages")
        params = _constraint_params(dict(params))
        for key, val in params.items():
            if key not in PARAMS:
                raise TypeError(f"unknown request field {key!r}")
            if not isinstance(val, PARAMS[key]) or (PARAMS[key] is int and isinstance(val, bool)):
                raise TypeError(f"request field {key!r}: wrong type {type(val).__name__}")
        if len(self.requests) >= self.max_requests:
            raise RuntimeError(f"{self.max_requests} requests already in flight")
        if id is None:
            self.next_id += 1
            while str(self.next_id) in self.requests:
                self.next_id += 1
            id = str(self.next_id)
        elif id in self.requests:
            raise ValueError(f"request {id!r} is in flight")
        msg = {"v": PROTOCOL_VERSION, "type": "generate", "id": id}
        if messages is not None:
            msg["messages"] = list(messages)
        elif prompt is not None:
            msg["prompt"] = prompt
        else:
            msg["prompt_ids"] = list(prompt_ids)
        msg.update(params)
        now = time.monotonic()
        limit = self.timeout if timeout is None else timeout
        req = _Request(id, callback, msgpack.packb(msg, use_bin_type=True), now, limit,
                       self.ack_timeout, self.stall)
        self.requests[id] = req
        self.stats["submitted"] += 1
        if self.welcomed:
            self._send_generate(req, now)
        return id

    def cancel(self, id):
        """Stops request id; its final arrives with finish_reason 'abort'. False if unknown."""
        req = self.requests.get(id)
        if req is None:
            return False
        if not req.cancel_wanted:
            req.cancel_wanted = True
            if req.acked:
                self._send_cancel(req, time.monotonic())
        return True

    def in_flight(self):
        return len(self.requests)

    def poll(self, timeout=None):
        """Waits up to timeout seconds (None: until something is due), handles what arrived
        and the timers, calling callbacks. Returns the number of events delivered."""
        self.events = 0
        due = self._timers(time.monotonic())
        wait = None if due is None else max(0.0, due - time.monotonic())
        if timeout is not None:
            wait = timeout if wait is None else min(wait, timeout)
        ready = dict(self.poller.poll(None if wait is None else int(wait * 1000 + 0.999)))
        now = time.monotonic()
        for name in ("tok", "post"):
            if self.mon[name] in ready:
                self._on_monitor(name, now)
        for name in ("tok", "post"):
            if self.sock[name] in ready:
                self._drain(name, now)
        self._timers(time.monotonic())
        return self.events

    def wait(self, timeout=None):
        """Polls until nothing is in flight; False if timeout seconds passed first."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.requests:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.poll(1.0 if left is None else min(left, 1.0))
        return True

    def stream(self, prompt=None, prompt_ids=None, id=None, timeout=None, messages=None,
               **params):
        """Yields the request's events in order, the final last. A request that ends with a
        local failure raises Refused, Timeout or Lost instead of yielding its final."""
        params.setdefault("stream", True)
        events = []
        rid = self.submit(prompt, prompt_ids, events.append, id, timeout, messages, **params)
        try:
            while True:
                if not events:
                    self.poll(1.0)
                while events:
                    ev = events.pop(0)
                    if ev.final and ev.status != "ok":
                        raise {"refused": Refused, "timeout": Timeout, "lost": Lost}[ev.status](
                            ev.id, ev.error, ev.message)
                    yield ev
                    if ev.final:
                        return
        finally:
            if rid in self.requests:  # the caller stopped iterating early
                self.cancel(rid)

    def generate(self, prompt=None, prompt_ids=None, messages=None, **params):
        """Runs one request to the end; returns a dict with text, tokens, finish_reason,
        usage, timings, seed and the client's ttft/e2e (seconds). Raises like stream()."""
        params.setdefault("stream", False)
        text, tokens, times, final = [], [], [], None
        for ev in self.stream(prompt, prompt_ids, messages=messages, **params):
            text.append(ev.text)
            tokens.extend(ev.tokens)
            times.extend([ev.recv_time - ev.submit_time] * len(ev.tokens))
            final = ev
        return {"id": final.id, "text": "".join(text), "tokens": tokens,
                "finish_reason": final.finish_reason, "usage": final.usage,
                "timings": final.timings, "seed": final.seed, "handle": final.handle,
                "ttft": times[0] if times else None,
                "e2e": final.recv_time - final.submit_time, "token_times": times}

    # --- receiving -----------------------------------------------------------------------------

    def _on_monitor(self, name, now):
        while True:
            try:
                ev = recv_monitor_message(self.mon[name], flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if ev["event"] == zmq.EVENT_DISCONNECTED:
                self.down[name] = True
            elif ev["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._on_handshake(name, now)

    def _on_handshake(self, name, now):
        was_down, self.down[name] = self.down[name], False
        self.stats["reconnects"] += was_down
        if name == "post":
            self.hello_ivl = 0.02
            self._send_hello(now)
        for req in list(self.requests.values()):
            if name == "tok" and not req.acked:
                req.gen_due = now
            elif name == "tok" and req.cancel_wanted:
                req.cancel_due = now
            elif name == "post" and was_down and (req.acked or req.next_seq > 0):
                self._send_resume(req, now)

    def _drain(self, name, now):
        for _ in range(4096):
            try:
                frames = self.sock[name].recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            msg = None
            if len(frames) == 2 and frames[0] == b"":
                try:
                    msg = msgpack.unpackb(frames[1], raw=False)
                except (ValueError, msgpack.UnpackException):
                    msg = None
            if not isinstance(msg, dict) or msg.get("v") != PROTOCOL_VERSION:
                self.stats["malformed"] += 1
                continue
            self._on_message(name, msg, now)

    def _on_message(self, name, msg, now):
        kind = msg.get("type")
        if kind == "welcome":
            if name == "post":
                self._on_welcome(now)
            return
        req = self.requests.get(msg.get("id"))
        if req is None and name == "post" and kind == "final" and isinstance(msg.get("id"), str):
            self._send_release(msg["id"])  # a repeat after our release was lost
        if req is None:
            self.stats["strays"] += 1
            return
        if name == "tok" and kind == "ack":
            self._on_ack(req, msg, now)
        elif name == "tok" and kind == "error":
            if not req.acked and req.next_seq == 0:
                self._fail(req, "refused", msg.get("code"), msg.get("message", ""))
        elif name == "post" and kind in ("delta", "final"):
            self._on_output(req, msg, kind == "final", now)
        elif name == "post" and kind == "error":
            if msg.get("code") == "not_found" and (req.acked or req.next_seq > 0):
                self._fail(req, "lost", "not_found", msg.get("message", ""))
        else:
            self.stats["strays"] += 1

    def _on_welcome(self, now):
        self.welcomed, self.hello_due, self.hello_ivl = True, None, 0.02
        self.unanswered = 0
        for req in self.requests.values():
            if not req.acked and not req.sent_once:
                req.gen_due = now

    def _on_ack(self, req, msg, now):
        if req.acked:
            return  # the answer to a resend
        req.acked, req.gen_due, req.body, req.last_rx = True, None, None, now
        req.handle, req.seed = msg.get("handle"), msg.get("seed")
        req.prompt_tokens = msg.get("prompt_tokens")
        self.stats["acked"] += 1
        if req.cancel_wanted:
            self._send_cancel(req, now)

    def _on_output(self, req, msg, final, now):
        seq = msg.get("seq")
        req.last_rx = now
        if not isinstance(seq, int) or not isinstance(msg.get("text"), str):
            self.stats["malformed"] += 1
            return
        if seq < req.next_seq:
            self.stats["duplicates"] += 1
            return
        if seq > req.next_seq:
            self.stats["gaps"] += 1
            if not req.resume_pending or now - req.resume_time >= self.stall:
                self._send_resume(req, now)
                req.resume_pending = True
            return
        req.next_seq += 1
        req.n_out += len(msg.get("tokens", []))
        req.resume_pending, req.stall_ivl = False, self.stall
        ev = Event(req, final, msg)
        if final:
            self._send_release(req.id)
            self._finish(req, ev)
        else:
            self.stats["deltas"] += 1
            self._deliver(req, ev)

    def _deliver(self, req, ev):
        self.events += 1
        if req.callback is not None:
            req.callback(ev)

    def _finish(self, req, ev):
        self.stats["finished"] += 1
        del self.requests[req.id]
        self._deliver(req, ev)

    def _fail(self, req, status, code, message):
        ev = Event(req, True, {"finish_reason": "error", "error": code, "message": message,
                               "usage": {"prompt_tokens": req.prompt_tokens or 0,
                                         "completion_tokens": req.n_out, "cached_tokens": 0}},
                   status=status)
        self._finish(req, ev)

    # --- timers --------------------------------------------------------------------------------

    def _timers(self, now):
        """Runs what is due; returns when the next thing is due (None: nothing is)."""
        if self.hello_due is not None and now >= self.hello_due:
            self._send_hello(now)
        due = [self.hello_due] if self.hello_due is not None else []
        for req in list(self.requests.values()):
            d = self._request_timers(req, now)
            if d is not None:
                due.append(d)
        return min(due) if due else None

    def _request_timers(self, req, now):
        if req.deadline is not None and now >= req.deadline:
            if req.acked:
                self._send_cancel(req, now)
            self.stats["timeouts"] += 1
            self._fail(req, "timeout", "internal", "timed out")
            return None
        due = [req.deadline] if req.deadline is not None else []
        if not req.acked and self.welcomed:
            if req.gen_due is not None and now >= req.gen_due:
                self._send_generate(req, now)
            due.append(req.gen_due)
        if req.acked and req.cancel_wanted:
            if now >= req.cancel_due:
                self._send_cancel(req, now)
            due.append(req.cancel_due)
        if req.acked or req.next_seq > 0:
            stall_at = max(req.last_rx, req.resume_time) + req.stall_ivl
            if now >= stall_at:  # quiet: its tail may have died with a postprocd
                self._send_resume(req, now)
                req.stall_ivl = min(req.stall_ivl * 2, BACKOFF_MAX)
                if now - self.hello_time >= self.stall and self.hello_due is None:
                    self.hello_due = now
                stall_at = now + req.stall_ivl
            due.append(stall_at)
        return min(due) if due else None
