// The Vercel AI SDK (`ai` with `@ai-sdk/openai`) pointed at intentgate by
// base URL alone, on the shipped routes and without a key: a tool loop
// (`generateText` calling a tool, then answering from its result) and a
// structured object (`generateObject`), through chat completions and
// through the Responses API (the provider's default). One upstream call per
// model call, counted at the simulator. And a call slower than the client's
// timeout, which the SDK retries: still one upstream call.
//
// Run by tests/official_sdks.rs with INTENTGATE_URL, INTENTGATE_KEY and
// SIM_URL set. Exits non-zero (with the failed assertion) on any deviation.

import assert from 'node:assert/strict';
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, stepCountIs, tool } from 'ai';
import { z } from 'zod';

const { INTENTGATE_URL: base, INTENTGATE_KEY: apiKey, SIM_URL: sim } = process.env;
const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 3 });
const simCalls = async () => (await (await fetch(`${sim}/sim/calls`)).json()).total;

/** A fetch that gives up after `ms` as a network failure would (which the
 * SDK retries; an abort it would not), noting each request it sends. */
function impatientFetch(ms, sent) {
  return async (url, init) => {
    sent.push(url);
    const signal = AbortSignal.timeout(ms);
    try {
      return await fetch(url, { ...init, signal });
    } catch (error) {
      if (signal.aborted) throw new TypeError('fetch failed', { cause: error });
      throw error;
    }
  };
}

async function retryIsOneJob() {
  const sent = [];
  const impatient = createOpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 5, fetch: impatientFetch(600, sent) });
  await fetch(`${sim}/sim/scripts`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: null, script: 'delay=1500', times: 1 }),
  });
  const before = await simCalls();
  const { text } = await generateText({ model: impatient.chat('chat'), prompt: `slow ${crypto.randomUUID()}` });
  assert.match(text, /^echo: slow/);
  assert.ok(sent.length >= 2, `the SDK retried (${sent.length} requests)`);
  assert.equal((await simCalls()) - before, 1, 'the retries found the same job');
}

async function toolLoop(model, via) {
  const before = await simCalls();
  let called = 0;
  const weather = tool({
    description: 'The weather in a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async () => { called += 1; return 'rain'; },
  });
  const result = await generateText({
    model, tools: { weather }, stopWhen: stepCountIs(3), prompt: `Weather in Utrecht? ${crypto.randomUUID()}`,
  });
  assert.equal(called, 1, `${via}: the tool ran once`);
  assert.equal(result.steps.length, 2, `${via}: a call, then an answer`);
  assert.match(result.text, /rain/, `${via}: answered from the tool's result`);
  assert.equal((await simCalls()) - before, 2, `${via}: one upstream call per model call`);
}

async function object(model, via) {
  const before = await simCalls();
  const { object } = await generateObject({
    model, schema: z.object({ name: z.string(), age: z.number() }), prompt: `Ann is 31. ${crypto.randomUUID()}`,
  });
  assert.equal(typeof object.name, 'string', `${via}: ${JSON.stringify(object)}`);
  assert.equal(typeof object.age, 'number', `${via}: ${JSON.stringify(object)}`);
  assert.equal((await simCalls()) - before, 1, `${via}: one upstream call`);
}

for (const [model, via] of [[provider.chat('chat'), 'chat completions'], [provider('chat'), 'Responses']]) {
  await toolLoop(model, via);
  await object(model, via);
  console.log(`ok ${via}`);
}
await retryIsOneJob();
console.log('ok retry');
console.log('all passed');
