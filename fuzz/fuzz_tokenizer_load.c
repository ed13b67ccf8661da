/* Fuzz target: tokenizer.json loading. Any bytes must either load or fail
 * with a message, never crash or leak. When a file loads, a fixed text is
 * encoded, decoded and streamed through the detokenizer, so what the loader
 * built (tries, merge table, byte table, regexes) is exercised too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

static const char sample[] = "Hello, world! 12345 <｜User｜>héllo\n\t  <think>x</think> 中文 👍🏽 don't";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tide_status st = {0};
    tide_tokenizer *tok = NULL;
    if (tide_tokenizer_load_json((const char *)data, size, "fuzz", &tok, &st) != 0) {
        if (tok || !st.msg[0]) abort(); /* a failure must say why and return nothing */
        return 0;
    }
    tide_tok_ids ids = {0};
    for (unsigned flags = 0; flags <= TIDE_ENCODE_SPLIT_SPECIAL; flags++) {
        ids.n = 0;
        if (tide_tokenizer_encode(tok, sample, sizeof sample - 1, flags, NULL, &ids, &st) != 0) continue;
        char *text = NULL;
        size_t len = 0;
        if (tide_tokenizer_decode(tok, ids.ids, ids.n, TIDE_DECODE_SKIP_SPECIAL, &text, &len, &st) == 0) free(text);
        if (tide_detok_decode_all(tok, TIDE_DETOK_HOLD_ADDED, ids.ids, ids.n, &text, &len, &st) == 0) free(text);
    }
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);
    return 0;
}
