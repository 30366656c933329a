// Minimal stacked-bar chart as inline SVG (no library). Each bar segment carries a <title>.
import { uid } from './dom.js';

const NS = 'http://www.w3.org/2000/svg';
// Colour-blind-friendly hues, each at least 3:1 against white.
export const PALETTE = ['#1f5fae', '#c0501c', '#1b7f4f', '#9b3d8f', '#7a6400', '#0f7584', '#5c4ccf', '#555555'];

function s(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text != null) el.textContent = text;
  return el;
}

function niceMax(v) {
  if (!(v > 0)) return 0;
  const exp = 10 ** Math.floor(Math.log10(v));
  const f = v / exp;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * exp;
}

/**
 * stackedBars({ title, days: ['YYYY-MM-DD'...], series: [{ name, color, values: number[] }], format })
 * -> <svg role="img"> with axis labels, one stacked bar per day.
 */
export function stackedBars({ title, days, series, format }) {
  const W = 720, H = 220, L = 76, R = 8, T = 12, B = 28;
  const pw = W - L - R, ph = H - T - B;
  const totals = days.map((_, i) => series.reduce((sum, se) => sum + (se.values[i] || 0), 0));
  const grand = totals.reduce((a, b) => a + b, 0);
  const max = niceMax(Math.max(0, ...totals));
  const titleId = uid('chart');
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': titleId, class: 'chart' });
  svg.append(s('title', { id: titleId }, `${title}: total ${format(grand)} over ${days.length} days.`));

  // Horizontal grid lines with value labels.
  for (const f of max > 0 ? [0, 0.5, 1] : [0]) {
    const y = T + ph - f * ph;
    svg.append(s('line', { x1: L, x2: W - R, y1: y, y2: y, class: f === 0 ? 'axis' : 'grid' }));
    svg.append(s('text', { x: L - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' }, format(max * f)));
  }

  const step = pw / Math.max(1, days.length);
  const bw = Math.max(2, step * 0.72);
  days.forEach((day, i) => {
    const x = L + i * step + (step - bw) / 2;
    if (totals[i] > 0) {
      const g = s('g');
      g.append(s('title', {}, `${day}: ${format(totals[i])}`));
      let y = T + ph;
      for (const se of series) {
        const v = se.values[i] || 0;
        if (v <= 0) continue;
        const hgt = Math.max(0.75, (v / max) * ph);
        y -= hgt;
        const rect = s('rect', { x: x.toFixed(1), y: y.toFixed(1), width: bw.toFixed(1), height: hgt.toFixed(1), fill: se.color, class: 'seg' });
        rect.append(s('title', {}, `${day} · ${se.name}: ${format(v)}`));
        g.append(rect);
      }
      svg.append(g);
    }
    if ((days.length - 1 - i) % 5 === 0) {
      svg.append(s('text', { x: (x + bw / 2).toFixed(1), y: H - 8, 'text-anchor': 'middle', class: 'tick' }, day.slice(5)));
    }
  });

  if (max === 0) {
    svg.append(s('text', { x: L + pw / 2, y: T + ph / 2, 'text-anchor': 'middle', class: 'empty-note' }, 'No usage in this period'));
  }
  return svg;
}
