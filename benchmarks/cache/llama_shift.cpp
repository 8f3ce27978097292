// llama.cpp's context shift, token by token, with each token's loss: the side of shift_vs_llamacpp.py that
// llama.cpp runs. Built against a llama.cpp build's static libraries (shift_vs_llamacpp.py compiles it).
//
//   llama_shift MODEL.gguf N_CTX N_KEEP < token ids (whitespace-separated)
//
// Feeds the ids one at a time, as llama-completion generates (tools/completion: when n_past + 1 >= n_ctx,
// n_discard = (n_past - n_keep) / 2; llama_memory_seq_rm(keep, keep + discard);
// llama_memory_seq_add(keep + discard, n_past, -discard); n_past -= discard — the keys re-rotated by llama.cpp's
// own K-shift), and prints for every id after the first: index, id, -log p(id | what the cache holds).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llama.h"

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf N_CTX N_KEEP < token ids\n", argv[0]);
        return 2;
    }
    const int n_ctx = atoi(argv[2]), n_keep = atoi(argv[3]);
    std::vector<llama_token> ids;
    for (int id; scanf("%d", &id) == 1;) ids.push_back(id);
    if (ids.size() < 2 || n_keep < 0 || n_keep + 2 > n_ctx) {
        fprintf(stderr, "need >= 2 ids and 0 <= N_KEEP <= N_CTX - 2\n");
        return 2;
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 1;
    cp.n_ubatch = 1;
    cp.n_threads = cp.n_threads_batch = 1;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create a context of %d\n", n_ctx); return 1; }
    if ((int) llama_n_ctx(ctx) != n_ctx) {
        fprintf(stderr, "llama.cpp made a context of %u, not %d (give a multiple of 256)\n", llama_n_ctx(ctx), n_ctx);
        return 2;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_memory_t mem = llama_get_memory(ctx);
    int n_past = 0, shifts = 0;
    for (size_t i = 0; i + 1 < ids.size(); i++) {
        if (n_past + 1 >= n_ctx) {  // llama-completion's rule
            const int n_discard = (n_past - n_keep) / 2;
            llama_memory_seq_rm(mem, 0, n_keep, n_keep + n_discard);
            llama_memory_seq_add(mem, 0, n_keep + n_discard, n_past, -n_discard);
            n_past -= n_discard;
            shifts++;
        }
        llama_token tok = ids[i];
        llama_batch batch = llama_batch_get_one(&tok, 1);
        std::vector<llama_pos> pos = {n_past};
        batch.pos = pos.data();
        if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "llama_decode failed at %zu\n", i); return 1; }
        n_past++;
        const float * logits = llama_get_logits_ith(ctx, -1);
        double top = logits[0];
        for (int v = 1; v < n_vocab; v++) top = logits[v] > top ? logits[v] : top;
        double sum = 0;
        for (int v = 0; v < n_vocab; v++) sum += std::exp((double) logits[v] - top);
        const double nll = -((double) logits[ids[i + 1]] - top - std::log(sum));
        printf("%zu %d %.6f\n", i + 1, ids[i + 1], nll);
    }
    fprintf(stderr, "%d shifts\n", shifts);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
