// Console entry point: session check, sign-in form, top nav and hash router.
import { api, session, onUnauthorized } from './api.js';
import { setAlert, showError, clearMessages, errText, replace } from './dom.js';
import * as keys from './keys.js';
import * as usage from './usage.js';
import * as batches from './batches.js';
import * as rentals from './rentals.js';
import * as models from './models.js';
import * as playground from './playground.js';
import * as chat from './chat.js';
import * as admin from './admin.js';
import * as docs from './docs.js';

const ROUTES = {
  chat: { title: 'Chat', page: chat },
  keys: { title: 'API keys', page: keys },
  usage: { title: 'Usage', page: usage },
  batches: { title: 'Batches', page: batches },
  rentals: { title: 'GPU rentals', page: rentals },
  models: { title: 'Models', page: models },
  playground: { title: 'Playground', page: playground },
  docs: { title: 'Docs', page: docs },
  admin: { title: 'Admin', page: admin, admin: true },
};
const DEFAULT_ROUTE = 'keys';

const $ = (id) => document.getElementById(id);
let pageCtl = null; // AbortController of the page currently shown
let rendered = false;

const isAdmin = () => session.account?.role === 'admin';
const routeName = () => (/^#\/([a-z]+)/.exec(location.hash) || [])[1] || '';
const allowed = (name) => Boolean(ROUTES[name]) && (!ROUTES[name].admin || isAdmin());

function leavePage() {
  pageCtl?.abort();
  pageCtl = null;
}

function showSignIn(message = '') {
  leavePage();
  session.account = null;
  session.csrf = null;
  rendered = false;
  $('booting').hidden = true;
  $('topbar').hidden = true;
  $('app').hidden = true;
  $('view').replaceChildren();
  clearMessages();
  $('signin').hidden = false;
  setAlert($('signin-error'), message);
  document.title = 'Sign in · Appliance console';
  $('account').focus();
}

function showApp() {
  $('booting').hidden = true;
  $('signin').hidden = true;
  $('topbar').hidden = false;
  $('app').hidden = false;
  $('account-name').textContent = session.account.name;
  $('account-role').hidden = !isAdmin();
  $('nav-admin').hidden = !isAdmin();
  route();
}

function route() {
  if (!session.account) return showSignIn();
  let name = routeName();
  if (!allowed(name)) {
    name = DEFAULT_ROUTE;
    history.replaceState(null, '', `#/${name}`);
  }
  const { title, page } = ROUTES[name];
  leavePage();
  pageCtl = new AbortController();
  clearMessages();
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.route === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${title} · Appliance console`;
  const view = $('view');
  const heading = $('page-title');
  heading.textContent = title;
  replace(view);
  view.dataset.page = name;
  // Pages build their DOM synchronously, then load data.
  const done = page.render({ view, signal: pageCtl.signal, account: session.account });
  if (rendered) heading.focus(); // move focus on navigation, not on first load
  rendered = true;
  const signal = pageCtl.signal;
  Promise.resolve(done).catch((err) => { if (!signal.aborted) showError(err); });
}

async function signIn(ev) {
  ev.preventDefault();
  const account = $('account').value.trim();
  const password = $('password').value;
  const err = $('signin-error');
  if (!account || !password) {
    setAlert(err, 'Enter your account name and password.');
    (account ? $('password') : $('account')).focus();
    return;
  }
  setAlert(err, '');
  const btn = $('signin-submit');
  btn.disabled = true;
  try {
    const res = await api('/login', { method: 'POST', body: { account, password } });
    session.account = res.account;
    session.csrf = res.csrf;
    $('password').value = '';
    if (!allowed(routeName())) history.replaceState(null, '', `#/${DEFAULT_ROUTE}`);
    showApp();
    $('page-title')?.focus(); // the form that had focus is gone
  } catch (e) {
    $('password').value = '';
    setAlert(err, errText(e) || 'Sign-in failed.');
    $('password').focus();
  } finally {
    btn.disabled = false;
  }
}

async function signOut() {
  const btn = $('sign-out');
  btn.disabled = true;
  try {
    await api('/logout', { method: 'POST' });
  } catch { /* signed out locally either way */ }
  btn.disabled = false;
  showSignIn();
}

async function boot() {
  onUnauthorized(() => showSignIn(session.account ? 'Your session has ended. Please sign in again.' : ''));
  $('signin-form').addEventListener('submit', signIn);
  $('sign-out').addEventListener('click', signOut);
  window.addEventListener('hashchange', () => { if (session.account) route(); });
  try {
    const res = await api('/session');
    session.account = res.account;
    session.csrf = res.csrf;
    showApp();
  } catch (e) {
    if (!session.account && $('signin').hidden) showSignIn(errText(e));
  }
}

boot();
