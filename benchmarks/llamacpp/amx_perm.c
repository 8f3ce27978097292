/* A preload shim for llama.cpp's AMX build (README.md here, "AMX"): asks the kernel for permission to use
 * AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) when the process starts, before any
 * thread exists, and says on stderr what the kernel answered. llama.cpp itself asks later, from
 * ggml_backend_amx_buffer_type(); if its SIGILL at `tilezero` comes from a thread that ran before the
 * permission was granted, the binary runs with this preloaded:
 *     LD_PRELOAD=BIN/amx_perm.so BIN/llama-bench -m model.gguf ...
 */
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>

#define ARCH_GET_XCOMP_SUPP 0x1021
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

__attribute__((constructor)) static void request_amx(void) {
    unsigned long supported = 0, permitted = 0;
    syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, &supported);
    long rc = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &permitted);
    fprintf(stderr, "amx_perm: tile data supported by the kernel %s, request %s, permitted mask %#lx\n",
            (supported >> XFEATURE_XTILEDATA) & 1 ? "yes" : "no", rc == 0 ? "granted" : "refused", permitted);
}
