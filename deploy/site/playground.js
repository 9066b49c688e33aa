// The playground: Chinese in, English out, through the front door's native route
// (POST /predictions/zh_en), the one that carries beams, alternatives, glossaries, formats and
// streaming (docs/API.md).
import {authHeaders, serverMessage, wireKeyForm} from './key.js';

const ROUTE = '/predictions/zh_en';
const FORMAT_BY_EXTENSION = {srt: 'srt', vtt: 'vtt', md: 'markdown', markdown: 'markdown', html: 'html', htm: 'html'};
const EXTENSION_BY_FORMAT = {text: 'txt', html: 'html', srt: 'srt', vtt: 'vtt', markdown: 'md'};
const $ = (id) => document.getElementById(id);
let sourceName = 'translation';

function request() {
    const body = {text: $('source').value, format: $('format').value};
    const beams = parseInt($('beams').value, 10);
    const alternatives = parseInt($('alternatives').value, 10);
    if (beams > 0) {
        body.num_beams = beams;
    }
    if (alternatives > 0) {
        body.alternatives = alternatives;
    }
    const glossary = glossaryEntries();
    if (Object.keys(glossary).length) {
        body.glossary = glossary;
    }
    if ($('stream').checked) {
        body.stream = true;
    }
    return body;
}

async function translate() {
    showError('');
    clearResult();
    $('translate').disabled = true;
    $('meta').textContent = 'Translating…';
    try {
        const body = request();
        const response = await fetch(ROUTE, {
            method: 'POST',
            headers: {'Content-Type': 'application/json', ...authHeaders()},
            body: JSON.stringify(body),
        });
        if (!response.ok) {
            showError(await serverMessage(response));
            $('meta').textContent = '';
            return;
        }
        showResult(body.stream ? await readStream(response) : await response.json());
    } catch (error) {
        showError(`the request failed: ${error.message}`);
        $('meta').textContent = '';
    } finally {
        $('translate').disabled = false;
    }
}

// One JSON line per finished sentence ({"sentence": i, "translation": ...}), then the whole answer.
async function readStream(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = '';
    let final = null;
    $('streamed').hidden = false;
    for (;;) {
        const {value, done} = await reader.read();
        pending += decoder.decode(value || new Uint8Array(), {stream: !done});
        const lines = pending.split('\n');
        pending = done ? '' : lines.pop();
        for (const line of lines.filter((text) => text.trim())) {
            const message = JSON.parse(line);
            if (message.sentence !== undefined && message.translation !== undefined && !message.stats) {
                addStreamedSentence(message.sentence, message.translation);
            } else {
                final = message;
            }
        }
        if (done) {
            break;
        }
    }
    if (final === null || final.translation === undefined) {
        throw new Error(final && final.message ? final.message : 'the stream ended without a translation');
    }
    return final;
}

function addStreamedSentence(index, translation) {
    const item = document.createElement('li');
    item.dataset.sentence = String(index);
    item.textContent = translation;
    $('streamed').append(item);
    $('meta').textContent = `Sentence ${index + 1} done…`;
}

function showResult(answer) {
    $('result').value = answer.translation;
    $('download').disabled = false;
    const banner = $('standin-banner');
    banner.hidden = !answer.standin;
    banner.textContent = answer.standin ? `Stand-in: ${answer.notice || 'offline stand-in model: this output is NOT a translation'}` : '';
    showChoices(answer.translation, answer.alternatives || []);
    const stats = answer.stats || {};
    const warnings = (answer.warnings || []).map((warning) => warning.code || JSON.stringify(warning));
    $('meta').textContent = `${answer.model} ${answer.version} (${answer.variant}${answer.standin ? ', stand-in' : ''}): `
        + `${stats.sentences} sentences, ${stats.translated} translated, ${stats.cached} from the cache`
        + (warnings.length ? `; warnings: ${warnings.join(', ')}` : '');
}

function showChoices(best, alternatives) {
    const list = $('choice-list');
    list.replaceChildren();
    $('choices').hidden = alternatives.length === 0;
    [best, ...alternatives].forEach((text, index) => {
        const label = document.createElement('label');
        label.className = 'choice';
        const radio = document.createElement('input');
        radio.type = 'radio';
        radio.name = 'choice';
        radio.checked = index === 0;
        radio.addEventListener('change', () => { $('result').value = text; });
        label.append(radio, ` ${index === 0 ? 'Best' : `Alternative ${index}`}: ${text}`);
        list.append(label);
    });
}

function clearResult() {
    $('result').value = '';
    $('streamed').replaceChildren();
    $('streamed').hidden = true;
    $('choices').hidden = true;
    $('download').disabled = true;
}

function showError(message) {
    $('error').hidden = !message;
    $('error').textContent = message ? `Error ${message}` : '';
}

function addGlossaryRow(source = '', target = '') {
    const rows = $('glossary-rows');
    const number = rows.children.length + 1;
    const row = document.createElement('div');
    row.className = 'term';
    row.append(
        labelled(`term-source-${number}`, `Chinese term ${number}`, source, 'zh'),
        labelled(`term-target-${number}`, `English term ${number}`, target, 'en'),
    );
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.textContent = 'Remove';
    remove.setAttribute('aria-label', `Remove term ${number}`);
    remove.addEventListener('click', () => row.remove());
    row.append(remove);
    rows.append(row);
    row.querySelector('input').focus();
}

function labelled(id, text, value, lang) {
    const wrapper = document.createElement('span');
    const label = document.createElement('label');
    label.htmlFor = id;
    label.textContent = text;
    const input = document.createElement('input');
    input.id = id;
    input.lang = lang;
    input.value = value;
    wrapper.append(label, input);
    return wrapper;
}

function glossaryEntries() {
    const entries = {};
    for (const row of $('glossary-rows').children) {
        const [source, target] = row.querySelectorAll('input');
        if (source.value.trim() && target.value.trim()) {
            entries[source.value.trim()] = target.value.trim();
        }
    }
    return entries;
}

async function openFile() {
    const file = $('file').files[0];
    if (!file) {
        return;
    }
    $('source').value = await file.text();
    const dot = file.name.lastIndexOf('.');
    const extension = dot < 0 ? '' : file.name.slice(dot + 1).toLowerCase();
    $('format').value = FORMAT_BY_EXTENSION[extension] || 'text';
    sourceName = dot < 0 ? file.name : file.name.slice(0, dot);
}

function download() {
    const extension = EXTENSION_BY_FORMAT[$('format').value];
    const blob = new Blob([$('result').value], {type: 'text/plain;charset=utf-8'});
    const link = document.createElement('a');
    link.href = URL.createObjectURL(blob);
    link.download = `${sourceName}.en.${extension}`;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

wireKeyForm(() => {});
$('translate-form').addEventListener('submit', (event) => {
    event.preventDefault();
    translate();
});
$('source').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        $('translate-form').requestSubmit();
    }
});
$('file').addEventListener('change', openFile);
$('download').addEventListener('click', download);
$('add-term').addEventListener('click', () => addGlossaryRow());
