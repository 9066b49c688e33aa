// The API key, shared by both pages: typed once, kept for this tab only (sessionStorage), sent as a
// bearer header and never in a URL.
const STORAGE_NAME = 'zh_en.api_key';

export function storedKey() {
    return sessionStorage.getItem(STORAGE_NAME) || '';
}

export function authHeaders() {
    return storedKey() ? {Authorization: `Bearer ${storedKey()}`} : {};
}

// Wires the page's key form: #key-form, #api-key, #key-state, #forget-key.
export function wireKeyForm(onChange) {
    const form = document.getElementById('key-form');
    const input = document.getElementById('api-key');
    const state = document.getElementById('key-state');
    const forget = document.getElementById('forget-key');
    const show = () => {
        state.textContent = storedKey() ? 'A key is set for this tab.' : 'No key set.';
        forget.hidden = !storedKey();
    };
    form.addEventListener('submit', (event) => {
        event.preventDefault();
        if (input.value.trim()) {
            sessionStorage.setItem(STORAGE_NAME, input.value.trim());
        }
        input.value = '';
        show();
        onChange();
    });
    forget.addEventListener('click', () => {
        sessionStorage.removeItem(STORAGE_NAME);
        show();
        onChange();
    });
    show();
}

// The server's own words for a failed request: our JSON errors carry "message", LibreTranslate's
// "error"; anything else is shown as the text it is.
export async function serverMessage(response) {
    const text = await response.text();
    let message = text.trim() || response.statusText;
    try {
        const body = JSON.parse(text);
        message = body.message || body.error || text.trim();
    } catch (e) {
        // not JSON: the text as it came
    }
    return `${response.status}: ${message}`;
}
