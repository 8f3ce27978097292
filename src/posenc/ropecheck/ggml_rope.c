/* posenc's probe of ggml's own RoPE kernel (the one llama.cpp runs): rotate one vector at given positions.
 *
 * Built against a llama.cpp build's ggml libraries by `posenc engines install llama.cpp`
 * (posenc.ropecheck.llamacpp); run by `posenc rope --engines llama.cpp`.
 *
 *   posenc-ggml-rope N_DIMS MODE N_CTX_ORIG FREQ_BASE FREQ_SCALE EXT_FACTOR ATTN_FACTOR BETA_FAST BETA_SLOW
 *                    HEAD_DIM N_POS  < (HEAD_DIM probe values, then N_POS integer positions)
 *
 * prints N_POS lines of HEAD_DIM rotated values: ggml_rope_ext on a (HEAD_DIM, 1 head, N_POS tokens) tensor
 * whose every token is the probe, computed by ggml's CPU backend on one thread.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"
#include "ggml-cpu.h"

int main(int argc, char ** argv) {
    if (argc != 12) {
        fprintf(stderr, "usage: %s N_DIMS MODE N_CTX_ORIG FREQ_BASE FREQ_SCALE EXT_FACTOR ATTN_FACTOR BETA_FAST "
                        "BETA_SLOW HEAD_DIM N_POS < probe and positions\n", argv[0]);
        return 2;
    }
    const int n_dims = atoi(argv[1]), mode = atoi(argv[2]), n_ctx_orig = atoi(argv[3]);
    const float freq_base = (float) atof(argv[4]), freq_scale = (float) atof(argv[5]);
    const float ext_factor = (float) atof(argv[6]), attn_factor = (float) atof(argv[7]);
    const float beta_fast = (float) atof(argv[8]), beta_slow = (float) atof(argv[9]);
    const int head_dim = atoi(argv[10]), n_pos = atoi(argv[11]);
    if (head_dim <= 0 || n_pos <= 0 || n_dims <= 0 || n_dims > head_dim || head_dim > 4096 || n_pos > 4096) {
        fprintf(stderr, "bad sizes: n_dims %d, head_dim %d, n_pos %d\n", n_dims, head_dim, n_pos);
        return 2;
    }
    struct ggml_init_params params = {(size_t) 16 * 1024 * 1024 + (size_t) 8 * head_dim * n_pos * 4, NULL, false};
    struct ggml_context * ctx = ggml_init(params);
    struct ggml_tensor * x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, head_dim, 1, n_pos);
    struct ggml_tensor * pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_pos);
    float * probe = malloc(sizeof(float) * head_dim);
    for (int i = 0; i < head_dim; i++) {
        if (scanf("%f", &probe[i]) != 1) { fprintf(stderr, "probe value %d missing\n", i); return 2; }
    }
    for (int t = 0; t < n_pos; t++) {
        int p;
        if (scanf("%d", &p) != 1) { fprintf(stderr, "position %d missing\n", t); return 2; }
        ((int32_t *) pos->data)[t] = p;
        for (int i = 0; i < head_dim; i++) ((float *) x->data)[t * head_dim + i] = probe[i];
    }
    struct ggml_tensor * r = ggml_rope_ext(ctx, x, pos, NULL, n_dims, mode, n_ctx_orig, freq_base, freq_scale,
                                           ext_factor, attn_factor, beta_fast, beta_slow);
    struct ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, r);
    if (ggml_graph_compute_with_ctx(ctx, graph, 1) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "ggml_graph_compute failed\n");
        return 1;
    }
    for (int t = 0; t < n_pos; t++) {
        for (int i = 0; i < head_dim; i++) printf(i ? " %.9g" : "%.9g", ((float *) r->data)[t * head_dim + i]);
        printf("\n");
    }
    free(probe);
    ggml_free(ctx);
    return 0;
}
