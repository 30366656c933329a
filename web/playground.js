// Playground: tools for the models that do not chat, called as the signed-in account (the console's
// inference route: no key in the page; billed to the account): decisions (playground-decisions.js)
// and rerank (playground-rerank.js). Chat and image generation are on the Chat page.
import { api } from './api.js';
import { h, section, put } from './dom.js';
import { decisionsTool } from './playground-decisions.js';
import { rerankTool } from './playground-rerank.js';

export async function render({ view, signal }) {
  const decisions = decisionsTool({ signal });
  const rerank = rerankTool({ signal });

  put(view,
    h('p', { class: 'muted', text: 'Requests made here are made as your account and billed to it, as your keys\' are. Chat and image generation are on the Chat page.' }),
    section('Decisions', h('p', { class: 'muted', text: 'Typed questions about an input, answered from the model\'s own probabilities (POST /v1/decisions): a predicate is yes or no, a choice one of its values, a score one of its levels.' }), decisions.form),
    section('Rerank', h('p', { class: 'muted', text: 'Documents ranked by their relevance to a query (POST /v1/rerank).' }), rerank.form));

  let all = [];
  try {
    all = (await api('/models', { signal }))?.data ?? [];
  } catch (err) {
    decisions.fill([], 'Models could not be loaded');
    rerank.fill([], 'Models could not be loaded');
    throw err;
  }
  decisions.fill(all);
  rerank.fill(all);
}
