#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// The official OpenAI Node SDK (npm `openai` v4, installed in tests/node by
// ops/setup) against gatewayd and the four real daemons on stories260K:
// completions streamed and not (the published greedy text), logprobs, stop,
// response_format (json_schema, json_object) and logit_bias,
// the SDK's error classes seeing our 400/401/404/413/429/503 bodies, chat
// completions streamed and not rendered by a real chat template (the same
// answer as the rendered text sent as a completion), chat refused clearly
// without a template, and the SDK's own retry of a connection error through a
// gatewayd SIGKILL re-attaching to the running request with its
// Idempotency-Key (generated once, read from /metrics). Each
// `async function test_<case>(` is the ctest `it.gateway_node.<case>`, run as
// `node test_gateway_node.js <case>`; exit 0 pass, 1 fail, 77 skip (no SDK
// installed, or refdata absent).
'use strict';

const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const { spawn, spawnSync } = require('child_process');

const SOURCE = process.env.RS_SOURCE || path.join(__dirname, '..', '..');
const BIN = process.env.RS_BIN || path.join(SOURCE, 'build', 'bin');
const REFDATA = process.env.RS_REFDATA || path.join(SOURCE, '..', 'shared', 'refdata');
const MODEL = path.join(REFDATA, 'stories260K.gguf');
const PUBLISHED = path.join(REFDATA, 'expected', 'stories260K.greedy-n256.txt');
const SKIP = 77;

let OpenAI;
try {
  OpenAI = require(path.join(SOURCE, 'tests', 'node', 'node_modules', 'openai'));
} catch (e) {
  console.error(`openai SDK not installed in tests/node (ops/setup installs it): ${e.message}`);
  process.exit(SKIP);
}
if (!fs.existsSync(MODEL)) {
  console.error(`${MODEL} absent`);
  process.exit(SKIP);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

/** The four daemons and any number of gatewayds, children of this process. */
class Instance {
  constructor(opts = {}) {
    this.tokenizerdArgs = opts.tokenizerd || [];
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rs-node-'));
    this.rundir = path.join(this.dir, 'run');
    this.instance = `node-${process.pid}`;
    this.procs = {};
    this.n = 0;
  }

  common() {
    return ['--model', MODEL, '--instance', this.instance, '--rundir', this.rundir, '--ctx',
            '1024', '--max-requests', '64'];
  }

  spawn(name, bin, args) {
    const log = fs.openSync(path.join(this.dir, `${name}-${this.n++}.log`), 'w');
    const p = spawn(path.join(BIN, bin), args, { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    this.procs[name] = p;
    return p;
  }

  startStage(stage) {
    const extra = stage === 'launcherd' ? ['--threads', '1']
                  : stage === 'tokenizerd' ? this.tokenizerdArgs : [];
    this.spawn(stage, stage, this.common().concat(extra));
  }

  async start() {
    this.startStage('schedulerd');
    for (let i = 0; i < 3000 && !fs.existsSync(path.join(this.rundir, 'schedulerd.door')); i++)
      await sleep(5);
    for (const s of ['launcherd', 'tokenizerd', 'postprocd']) this.startStage(s);
  }

  /** A gatewayd named `name` (port kept across restarts), healthy before this returns. */
  async gateway(name, extra = []) {
    const g = this[name] || (this[name] = { port: await freePort(), extra });
    this.spawn(name, 'gatewayd', ['--instance', this.instance, '--rundir', this.rundir,
                                  '--http-port', String(g.port)].concat(g.extra));
    await this.waitHealthy(g.port);
    return `http://127.0.0.1:${g.port}/v1`;
  }

  async waitHealthy(port, limitMs = 30000) {
    const end = Date.now() + limitMs;
    while (Date.now() < end) {
      try {
        const r = await fetch(`http://127.0.0.1:${port}/health`);
        if (r.status === 200) return;
      } catch (e) { /* not listening yet */ }
      await sleep(10);
    }
    this.dump();
    throw new Error(`gatewayd on ${port} not healthy`);
  }

  kill(name, sig = 'SIGKILL') {
    const p = this.procs[name];
    return new Promise((resolve) => {
      if (!p || p.exitCode !== null || p.signalCode !== null) return resolve();
      p.once('exit', () => resolve());
      p.kill(sig);
    });
  }

  dump() {
    for (const f of fs.readdirSync(this.dir).filter((f) => f.endsWith('.log')).sort())
      process.stderr.write(`---- ${f} ----\n${fs.readFileSync(path.join(this.dir, f), 'utf8')}`);
  }

  async stop(failed) {
    if (failed) this.dump();
    await Promise.all(Object.keys(this.procs).map((n) => this.kill(n, 'SIGTERM')));
    spawnSync(path.join(BIN, 'ringserve-shm'), ['rm', `ringserve-${this.instance}`]);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The first series value whose line starts with `prefix` in gatewayd's /metrics. */
async function metric(base, prefix) {
  const text = await (await fetch(base.replace(/\/v1$/, '/metrics'))).text();
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  return line ? Number(line.split(' ').pop()) : NaN;
}

const ACCEPTED = 'ringserve:stage_counter{model_name="stories260K",stage="tokenizerd",' +
                 'name="requests_accepted"}';
const GENERATED = 'ringserve:generation_tokens_total{model_name="stories260K"}';

async function withInstance(fn, opts = {}) {
  const inst = new Instance(opts);
  let failed = true;
  try {
    await inst.start();
    await fn(inst);
    failed = false;
  } finally {
    await inst.stop(failed);
  }
}

function client(baseURL, opts = {}) {
  return new OpenAI({ baseURL, apiKey: opts.apiKey || 'unused', maxRetries: opts.maxRetries ?? 0,
                      timeout: 60000 });
}

async function expectError(promise, cls, status, what) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof cls, `${what}: ${e.constructor.name} is not ${cls.name}: ${e.message}`);
    check(e.status === status, `${what}: status ${e.status}, want ${status}`);
    check(e.error && typeof e.error.message === 'string', `${what}: no error body`);
    return e;
  }
  throw new Error(`${what}: no error`);
}

// --- cases --------------------------------------------------------------------------------

async function test_completions_give_the_published_greedy_text() {
  const want = fs.readFileSync(PUBLISHED, 'utf8');
  await withInstance(async (inst) => {
    const ai = client(await inst.gateway('gw'));
    const r = await ai.completions.create({ model: 'stories260K', prompt: '', max_tokens: 256,
                                            temperature: 0 });
    check(r.choices[0].text === want, `text:\n${r.choices[0].text}\n---- published ----\n${want}`);
    check(r.usage.completion_tokens === 256 && r.choices[0].finish_reason === 'length', 'usage');
    const models = await ai.models.list();
    check(models.data.length === 1 && models.data[0].id === 'stories260K', 'models.list');
  });
}

async function test_streamed_completion_adds_up_with_a_usage_chunk() {
  await withInstance(async (inst) => {
    const ai = client(await inst.gateway('gw'));
    const req = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 60,
                  temperature: 0 };
    const whole = await ai.completions.create(req);
    const stream = await ai.completions.create({ ...req, stream: true,
                                                 stream_options: { include_usage: true } });
    let text = '', usage = null, finish = null, chunks = 0;
    for await (const c of stream) {
      chunks++;
      if (c.choices.length === 0) usage = c.usage;
      for (const ch of c.choices) {
        text += ch.text;
        finish = ch.finish_reason || finish;
      }
    }
    check(text === whole.choices[0].text, `stream text:\n${text}\nwhole:\n${whole.choices[0].text}`);
    check(usage && usage.completion_tokens === 60 && finish === 'length', 'usage chunk, finish');
    check(chunks > 10, `${chunks} chunks`);
  });
}

async function test_logprobs_and_stop() {
  await withInstance(async (inst) => {
    const ai = client(await inst.gateway('gw'));
    const r = await ai.completions.create({ model: 'stories260K', prompt: 'Once upon a time',
                                            max_tokens: 12, temperature: 0, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    check(lp.tokens.length === 12 && lp.token_logprobs.length === 12 &&
          lp.top_logprobs.length === 12 && lp.text_offset.length === 12, 'logprobs lengths');
    check(lp.tokens.join('') === r.choices[0].text, 'tokens add up to the text');
    check(lp.top_logprobs.every((d, i) => Object.keys(d).includes(lp.tokens[i])), 'top has it');
    const full = await ai.completions.create({ model: 'stories260K', prompt: 'Once upon a time',
                                               max_tokens: 80, temperature: 0 });
    const cut = await ai.completions.create({ model: 'stories260K', prompt: 'Once upon a time',
                                              max_tokens: 80, temperature: 0, stop: ['.'] });
    const t = full.choices[0].text;
    check(cut.choices[0].text === t.slice(0, t.indexOf('.')) &&
          cut.choices[0].finish_reason === 'stop', `stop: '${cut.choices[0].text}'`);
  });
}

async function test_response_format_and_logit_bias_constrain_the_output() {
  await withInstance(async (inst) => {
    const ai = client(await inst.gateway('gw'));
    const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 99 },
                     ok: { type: 'boolean' } }, required: ['n', 'ok'], additionalProperties: false };
    const r = await ai.completions.create({ model: 'stories260K', prompt: 'Once upon a time',
      max_tokens: 60, temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'rec', schema } } });
    const v = JSON.parse(r.choices[0].text);
    check(Number.isInteger(v.n) && v.n >= 0 && v.n <= 99 && typeof v.ok === 'boolean' &&
          Object.keys(v).length === 2, `json_schema output: ${r.choices[0].text}`);
    check(r.choices[0].finish_reason === 'stop', `finish ${r.choices[0].finish_reason}`);
    const o = await ai.completions.create({ model: 'stories260K', prompt: 'Once upon a time',
      max_tokens: 80, temperature: 0.8, seed: 3, response_format: { type: 'json_object' } });
    const text = o.choices[0].text;
    check(o.choices[0].finish_reason !== 'stop' || typeof JSON.parse(text) === 'object',
          `json_object output: ${text}`);
    const forced = await ai.completions.create({ model: 'stories260K', prompt: 'Once',
      max_tokens: 5, temperature: 0, logprobs: 1, logit_bias: { '300': 100 } });
    const base = await ai.completions.create({ model: 'stories260K', prompt: 'Once',
      max_tokens: 5, temperature: 0, logprobs: 1 });
    check(forced.choices[0].text !== base.choices[0].text &&
          new Set(forced.choices[0].logprobs.tokens).size === 1,
          `forced: '${forced.choices[0].text}' vs '${base.choices[0].text}'`);
    let refused = null;
    try {
      await ai.completions.create({ model: 'stories260K', prompt: 'x', max_tokens: 4,
        response_format: { type: 'json_schema', json_schema: { name: 'bad',
          schema: { type: 'integer', minimum: 'x' } } } });
    } catch (e) {
      refused = e;
    }
    check(refused instanceof OpenAI.BadRequestError, `bad schema: ${refused}`);
  });
}

async function test_sdk_error_classes_see_our_bodies() {
  const keys = path.join(os.tmpdir(), `rs-node-keys-${process.pid}`);
  fs.writeFileSync(keys, 'sk-right\n');
  try {
    await withInstance(async (inst) => {
      const base = await inst.gateway('gw', ['--max-body-bytes', '4096',
                                             '--max-inflight', '1', '--down-grace-ms', '100']);
      const ai = client(base);
      const e400 = await expectError(ai.completions.create({ model: 'stories260K', prompt: 'x',
                                                             temperature: 5 }),
                                     OpenAI.BadRequestError, 400, '400');
      check(e400.param === 'temperature' && e400.type === 'invalid_request_error', 'param');
      const e404 = await expectError(ai.completions.create({ model: 'nope', prompt: 'x' }),
                                     OpenAI.NotFoundError, 404, '404');
      check(e404.code === 'model_not_found', '404 code');
      await expectError(ai.completions.create({ model: 'stories260K', prompt: 'x'.repeat(8000) }),
                        OpenAI.APIError, 413, '413');
      // 429: the only slot is busy with a stream
      const busy = await ai.completions.create({ model: 'stories260K', prompt: 'x',
                                                 max_tokens: 1000, ignore_eos: true,
                                                 stream: true });
      const it = busy[Symbol.asyncIterator]();
      await it.next();
      const e429 = await expectError(ai.completions.create({ model: 'stories260K', prompt: 'y' }),
                                     OpenAI.RateLimitError, 429, '429');
      check(e429.headers['retry-after'] === '1', 'Retry-After');
      busy.controller.abort();
      // 401 on a second gatewayd of the instance, with keys
      const auth = await inst.gateway('gw_keys', ['--api-key', keys]);
      await expectError(client(auth, { apiKey: 'sk-wrong' }).models.list(),
                        OpenAI.AuthenticationError, 401, '401');
      const ok = await client(auth, { apiKey: 'sk-right' }).models.list();
      check(ok.data[0].id === 'stories260K', 'right key');
      // 503: a stage is down (not restarted, past --down-grace-ms)
      await inst.kill('launcherd');
      const health = base.replace(/\/v1$/, '/health');
      for (let i = 0; i < 2000 && (await fetch(health)).status !== 503; i++) await sleep(10);
      await sleep(300); // past --down-grace-ms
      const e503 = await expectError(ai.completions.create({ model: 'stories260K', prompt: 'x' }),
                                     OpenAI.InternalServerError, 503, '503');
      check(/launcherd/.test(e503.message), `503 names the stage: ${e503.message}`);
    });
  } finally {
    fs.rmSync(keys, { force: true });
  }
}

const QWEN = path.join(REFDATA, 'chat-templates', 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja');

/** The text ringserve-template renders for messages with the template file tmpl. */
function rendered(dir, tmpl, messages) {
  const conv = path.join(dir, 'conv.json');
  fs.writeFileSync(conv, JSON.stringify({ messages }));
  const r = spawnSync(path.join(BIN, 'ringserve-template'),
                      ['--template', tmpl, '--messages', conv, '--add-generation-prompt']);
  check(r.status === 0, `ringserve-template: ${r.stderr}`);
  return r.stdout.toString('utf8');
}

// Chat through tokenizerd's chat template (--chat-template: Qwen2.5's, which writes no BOS):
// the answer is the completion of the rendered text, streamed and not.
async function test_chat_completion_is_the_rendered_prompts_completion() {
  await withInstance(async (inst) => {
    const ai = client(await inst.gateway('gw'));
    const messages = [{ role: 'system', content: 'You tell short stories.' },
                      { role: 'user', content: [{ type: 'text', text: 'Once upon a time' }] }];
    const req = { model: 'stories260K', messages, max_tokens: 12, temperature: 0 };
    const chat = await ai.chat.completions.create(req);
    const prompt = rendered(inst.dir, QWEN, [messages[0], { role: 'user',
                                                           content: 'Once upon a time' }]);
    const done = await ai.completions.create({ model: 'stories260K', prompt, max_tokens: 12,
                                               temperature: 0 });
    const msg = chat.choices[0].message;
    check(msg.role === 'assistant' && msg.content === done.choices[0].text,
          `chat '${msg.content}' vs completion '${done.choices[0].text}'`);
    check(chat.usage.prompt_tokens === done.usage.prompt_tokens &&
          chat.usage.completion_tokens === 12, JSON.stringify(chat.usage));
    const stream = await ai.chat.completions.create({ ...req, stream: true,
                                                      stream_options: { include_usage: true } });
    let text = '', usage = null;
    for await (const c of stream) {
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) text += ch.delta.content || '';
    }
    check(text === msg.content, `streamed '${text}' vs '${msg.content}'`);
    check(usage && usage.prompt_tokens === chat.usage.prompt_tokens, 'stream usage chunk');
    const bad = await expectError(ai.chat.completions.create({ ...req, messages: [
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }] }),
                                  OpenAI.BadRequestError, 400, 'image part');
    check(bad.param === 'messages[0].content[0].type', bad.param);
  }, { tokenizerd: ['--chat-template', QWEN] });
}

// stories260K carries no chat template: chat is refused with a 400 saying so, streamed or not.
async function test_chat_without_a_template_is_refused_clearly() {
  await withInstance(async (inst) => {
    const ai = client(await inst.gateway('gw'));
    const req = { model: 'stories260K', messages: [{ role: 'user', content: 'Hello' }],
                  max_tokens: 8, temperature: 0 };
    for (const stream of [false, true]) {
      const e = await expectError(ai.chat.completions.create({ ...req, stream }),
                                  OpenAI.BadRequestError, 400, `chat stream=${stream}`);
      check(/no chat template/.test(e.message), e.message);
    }
  });
}

async function test_sdk_retry_through_a_gatewayd_sigkill_reattaches_generated_once() {
  await withInstance(async (inst) => {
    const base = await inst.gateway('gw');
    const req = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 1000,
                  temperature: 0, ignore_eos: true };
    const want = (await client(base).completions.create(req)).choices[0].text;
    const acc0 = await metric(base, ACCEPTED), gen0 = await metric(base, GENERATED);
    const ai = client(base, { maxRetries: 4 }); // the SDK retries connection errors itself
    const pending = ai.completions.create(req, { headers: { 'Idempotency-Key': 'node-1' } });
    for (let i = 0; i < 2000 && (await metric(base, GENERATED)) < gen0 + 20; i++) await sleep(2);
    await inst.kill('gw');
    await inst.gateway('gw'); // the supervisor's restart, on the same port
    const r = await pending;
    check(r.choices[0].text === want, 'retried text differs from the reference');
    check((await metric(base, ACCEPTED)) - acc0 === 1, 'accepted more than once');
    check((await metric(base, GENERATED)) - gen0 === 1000, 'generated more than once');
  });
}

async function test_stream_retried_with_its_key_after_sigkill_starts_at_the_first_token() {
  await withInstance(async (inst) => {
    const base = await inst.gateway('gw');
    const req = { model: 'stories260K', prompt: 'The dog', max_tokens: 1000, temperature: 0,
                  ignore_eos: true, stream: true };
    const collect = async (s) => {
      let t = '';
      for await (const c of s) for (const ch of c.choices) t += ch.text;
      return t;
    };
    const want = await collect(await client(base).completions.create(req));
    const acc0 = await metric(base, ACCEPTED);
    const opts = { headers: { 'Idempotency-Key': 'node-stream-1' } };
    const first = await client(base).completions.create(req, opts);
    const it = first[Symbol.asyncIterator]();
    let got = '';
    for (let i = 0; i < 20; i++) got += (await it.next()).value.choices[0].text;
    await inst.kill('gw');
    let broke = false;
    try {
      for (;;) {
        const n = await it.next();
        if (n.done) break;
      }
    } catch (e) {
      broke = true; // the connection died with gatewayd
    }
    check(broke && got.length > 0, 'the first stream should break');
    await inst.gateway('gw');
    const again = await collect(await client(base).completions.create(req, opts));
    check(again === want, 'the retried stream is not the whole output from the first token');
    check((await metric(base, ACCEPTED)) - acc0 === 1, 'accepted more than once');
  });
}

// --- main ---------------------------------------------------------------------------------

const cases = {
  test_completions_give_the_published_greedy_text,
  test_streamed_completion_adds_up_with_a_usage_chunk,
  test_logprobs_and_stop,
  test_response_format_and_logit_bias_constrain_the_output,
  test_sdk_error_classes_see_our_bodies,
  test_chat_completion_is_the_rendered_prompts_completion,
  test_chat_without_a_template_is_refused_clearly,
  test_sdk_retry_through_a_gatewayd_sigkill_reattaches_generated_once,
  test_stream_retried_with_its_key_after_sigkill_starts_at_the_first_token,
};

(async () => {
  const names = process.argv[2] ? [`test_${process.argv[2]}`] : Object.keys(cases);
  let failed = 0;
  for (const n of names) {
    if (!cases[n]) {
      console.error(`no case ${n}`);
      process.exit(2);
    }
    try {
      await cases[n]();
      console.log(`${n}: ok`);
    } catch (e) {
      failed++;
      console.error(`${n}: FAILED: ${e.stack}`);
    }
  }
  process.exit(failed ? 1 : 0);
})();
