// The status page: live plots, in plain SVG, of what GET /status/metrics reports (front_door.js,
// status()): replicas' counters and gauges from their metrics ports, latency from the front door.
import {authHeaders, serverMessage, storedKey, wireKeyForm} from './key.js';

const ROUTE = '/status/metrics';
const REFRESH_MS = 3000;
const HISTORY = 60;  // readings kept per plot: three minutes
const MIN_SLOTS = 10;  // the x axis's span before that many readings came in
const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 320;
const HEIGHT = 120;
const $ = (id) => document.getElementById(id);

// Each plot: its title, unit, and the series it draws from a reading and the one before it.
const PLOTS = [
    {id: 'requests', title: 'Requests/s', unit: '/s', series: (now, before) => ({
        'all replicas': before && rate(sum(now, 'requests') - sum(before, 'requests'), now.time - before.time),
    })},
    {id: 'latency', title: `Latency (answered translations, last ${'{window}'} s)`, unit: 'ms', series: (now) => ({
        p50: now.front_door.p50_ms, p95: now.front_door.p95_ms,
    })},
    {id: 'queue', title: 'Queue depth (sentences waiting for a row)', unit: '', series: (now) => perReplica(now, 'queued_sentences')},
    {id: 'rows', title: 'Running rows', unit: '', series: (now) => perReplica(now, 'running_rows')},
    {id: 'cache', title: 'Sentence cache hit rate', unit: '%', top: 100, series: (now, before) => ({
        'all replicas': before && hitRate(now, before),
    })},
    {id: 'workers', title: 'Workers per replica (loaded since it started)', unit: '', series: (now) => perReplica(now, 'workers')},
];

const history = [];

function sum(reading, field) {
    return reading.replicas.filter((replica) => replica.up).reduce((total, replica) => total + replica[field], 0);
}

function rate(delta, seconds) {
    return seconds > 0 ? Math.max(0, delta) / seconds : null;
}

function hitRate(now, before) {
    const hits = sum(now, 'cache_hits') - sum(before, 'cache_hits');
    const lookups = hits + sum(now, 'cache_misses') - sum(before, 'cache_misses');
    return lookups > 0 ? (100 * hits) / lookups : null;
}

function perReplica(reading, field) {
    return Object.fromEntries(reading.replicas.map((replica) => [replica.name, replica.up ? replica[field] : null]));
}

async function poll() {
    if (!storedKey()) {
        $('updated').textContent = 'Enter the API key to see the service.';
        return;
    }
    try {
        const response = await fetch(ROUTE, {headers: authHeaders(), cache: 'no-store'});
        if (!response.ok) {
            showError(await serverMessage(response));
            return;
        }
        showError('');
        history.push(await response.json());
        if (history.length > HISTORY + 1) {
            history.shift();
        }
        draw();
    } catch (error) {
        showError(`the request failed: ${error.message}`);
    }
}

function draw() {
    const latest = history[history.length - 1];
    const down = latest.replicas.filter((replica) => !replica.up).map((replica) => replica.name);
    $('updated').textContent = `Updated ${new Date(latest.time * 1000).toLocaleTimeString()}: `
        + `${latest.replicas.length} replica${latest.replicas.length === 1 ? '' : 's'}${down.length ? `, not answering: ${down.join(', ')}` : ''}.`;
    for (const plot of PLOTS) {
        const lines = {};
        history.forEach((reading, index) => {
            const values = plot.series(reading, index > 0 ? history[index - 1] : null);
            for (const [name, value] of Object.entries(values)) {
                (lines[name] = lines[name] || []).push(typeof value === 'number' ? value : null);
            }
        });
        drawPlot(figure(plot, latest), lines, plot);
    }
}

function figure(plot, latest) {
    let element = $(`plot-${plot.id}`);
    if (!element) {
        element = document.createElement('figure');
        element.id = `plot-${plot.id}`;
        element.className = 'plot';
        const caption = document.createElement('figcaption');
        const svg = document.createElementNS(SVG, 'svg');
        svg.setAttribute('viewBox', `0 0 ${WIDTH} ${HEIGHT}`);
        svg.setAttribute('role', 'img');
        const legend = document.createElement('p');
        legend.className = 'legend';
        element.append(caption, svg, legend);
        $('plots').append(element);
    }
    element.querySelector('figcaption').textContent = plot.title.replace('{window}', latest.window_s);
    return element;
}

function drawPlot(element, lines, plot) {
    const unit = plot.unit;
    const svg = element.querySelector('svg');
    svg.replaceChildren();
    const values = Object.values(lines).flat().filter((value) => value !== null);
    const top = plot.top || niceTop(Math.max(1, ...values));
    svg.append(text(4, 12, `${format(top)}${unit}`), text(4, HEIGHT - 4, `0${unit}`));
    svg.append(shape('line', {x1: 0, y1: HEIGHT - 16, x2: WIDTH, y2: HEIGHT - 16, class: 'axis'}));
    const legend = [];
    Object.entries(lines).forEach(([name, points], index) => {
        // The x axis grows with the readings up to HISTORY of them, the latest at the right edge.
        const slots = Math.max(MIN_SLOTS, points.length - 1);
        const xy = points.map((value, i) => (value === null ? null
            : `${((i + slots + 1 - points.length) * WIDTH) / slots},${(HEIGHT - 16) - (value / top) * (HEIGHT - 32)}`));
        const drawn = xy.filter(Boolean);
        if (drawn.length) {
            svg.append(shape('polyline', {points: drawn.join(' '), class: `series series-${index % 4}`}));
            const last = drawn[drawn.length - 1].split(',');
            svg.append(shape('circle', {cx: last[0], cy: last[1], r: 2.5, class: `dot series-${index % 4}`}));
        }
        const latest = [...points].reverse().find((value) => value !== null);
        legend.push(`${name}: ${latest === undefined ? '–' : `${format(latest)}${unit}`}`);
    });
    svg.setAttribute('aria-label', legend.join('; '));
    element.querySelector('.legend').replaceChildren(...legend.map((entry, index) => {
        const item = document.createElement('span');
        item.className = `key series-${index % 4}`;
        item.textContent = entry;
        return item;
    }));
}

function niceTop(value) {
    const step = 10 ** Math.floor(Math.log10(value));
    return [1, 2, 5, 10].map((factor) => factor * step).find((candidate) => candidate >= value);
}

function format(value) {
    return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

function shape(name, attributes) {
    const element = document.createElementNS(SVG, name);
    Object.entries(attributes).forEach(([key, value]) => element.setAttribute(key, String(value)));
    return element;
}

function text(x, y, content) {
    const element = shape('text', {x, y, class: 'label'});
    element.textContent = content;
    return element;
}

function showError(message) {
    $('error').hidden = !message;
    $('error').textContent = message ? `Error ${message}` : '';
}

wireKeyForm(() => {
    history.length = 0;
    poll();
});
poll();
setInterval(poll, REFRESH_MS);
