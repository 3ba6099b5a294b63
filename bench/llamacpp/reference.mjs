// SPDX-License-Identifier: MIT
// llama.cpp's speed on one GGUF, measured as bench_decode measures ringserve's:
// prompt tok/s of one P-token prompt from an empty context, and batch-1 decode
// tok/s of S greedy steps after a 64-token context, best of R runs, T threads.
// Prints one JSON line. Usage: node reference.mjs MODEL.gguf [T] [P] [S] [R]
// Decode time per token is the smaller of llama.cpp's own eval counter and the
// median interval between generated tokens as seen here: the counter alone
// can include time the binding spends before it synchronizes, the interval
// alone the binding's own work; the smaller favours llama.cpp.
import fs from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [model, threads = "1", prompt = "512", steps = "32", reps = "3"] = process.argv.slice(2);
function usage(why) {
    console.error(`usage: node reference.mjs MODEL.gguf [threads] [prompt] [steps] [reps]: ${why}`);
    process.exit(2);
}
if (!model) usage("no model");
if (!fs.existsSync(model)) usage(`${model}: no such file`);
for (const [name, v] of [["threads", threads], ["prompt", prompt], ["steps", steps], ["reps", reps]])
    if (!/^[1-9][0-9]{0,4}$/.test(v)) usage(`${name} must be a whole number from 1 to 99999, not '${v}'`);
let lines = [];
const llama = await getLlama({gpu: false, build: "never", maxThreads: +threads,
                              logLevel: LlamaLogLevel.info, logger: (level, msg) => lines.push(msg)});
const m = await llama.loadModel({modelPath: model, gpuLayers: 0});
const ctx = await m.createContext({contextSize: +prompt + +steps + 128, batchSize: 512,
                                   threads: +threads, sequences: 1, performanceTracking: true});
const seq = ctx.getSequence();
const vocab = m.fileInfo.metadata.tokenizer.ggml.tokens.length;
const ids = n => Array.from({length: n}, (_, i) => 3 + (i * 7919) % (vocab - 3));

/* llama.cpp's counters since the last call: {prompt: [ms, tokens], eval: [ms, runs]} */
async function counters() {
    lines = [];
    await ctx.printTimings();
    const get = re => {
        for (const l of lines) {
            const x = re.exec(l);
            if (x) return [+x[1], +x[2]];
        }
        return [NaN, 0];
    };
    return {prompt: get(/prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/),
            eval: get(/\beval time =\s*([\d.]+) ms \/\s*(\d+) runs/)};
}

let bestPrompt = 0, bestDecode = 0;
for (let r = 0; r < +reps; r++) {
    await seq.clearHistory();
    await counters();
    await seq.evaluateWithoutGeneratingNewTokens(ids(+prompt));
    const p = (await counters()).prompt;
    bestPrompt = Math.max(bestPrompt, p[1] / (p[0] / 1e3));

    await seq.clearHistory();
    await seq.evaluateWithoutGeneratingNewTokens(ids(64));
    await counters();
    const at = [];
    for await (const t of seq.evaluate([ids(65)[64]], {temperature: 0})) {
        at.push(performance.now());
        if (at.length > +steps) break;
    }
    const e = (await counters()).eval;
    const gaps = at.slice(1).map((t, i) => t - at[i]).sort((a, b) => a - b);
    const perToken = Math.min(e[0] / e[1], gaps[gaps.length >> 1]);
    bestDecode = Math.max(bestDecode, 1e3 / perToken);
}
console.log(JSON.stringify({model, threads: +threads, prompt: +prompt, prompt_tok_s: +bestPrompt.toFixed(1),
                            decode_b1_tok_s: +bestDecode.toFixed(1),
                            cpu: llama.systemInfo.replace(/\s*\|\s*$/, "")}));
await llama.dispose();
