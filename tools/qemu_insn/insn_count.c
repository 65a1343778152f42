/* insn_count.c: a qemu-user TCG plugin that counts retired guest instructions.
 *
 * Used by scripts/arm-insn-count.sh to compare picolm and llama.cpp, both built for aarch64, by
 * the instructions they execute per prefill and per decode token (issue 17). Debian's qemu-user
 * supports plugins but ships neither qemu-plugin.h nor the example plugins, so the few API
 * declarations needed are written out below; they follow the QEMU 7.2 plugin API (version 1).
 *
 * Counting: at translation time each translation block (TB) gets an inline "add n_insns" on a
 * 64-bit counter, executed each time the TB starts. That is exact for every TB that runs to its
 * end; one left early by a fault over-counts the instructions after the faulting one. In user
 * mode that is a guest signal (not used by either program), so the count is exact in practice;
 * scripts/arm-insn-count.sh checks it on a loop of known length.
 *
 * The inline add is not atomic: with several guest threads (each one a vCPU in qemu-user)
 * running at once the count would lose updates. So the plugin also counts the vCPUs it saw start
 * and reports them; the script runs everything with one thread and rejects a run with more.
 *
 * Arguments (qemu -plugin PATH,out=FILE): out=FILE appends one line
 *   "insns <count> vcpus <n>"
 * to FILE at exit; without it the line goes through qemu_plugin_outs (shown with -d plugin).
 *
 * Build: gcc -O2 -shared -fPIC -fvisibility=hidden -o insn_count.so insn_count.c
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- the subset of qemu-plugin.h (QEMU 7.2) this plugin uses ---------------------------------- */
#define PLUGIN_EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;

typedef struct qemu_info_t {
    const char *target_name;
    struct {
        int min;
        int cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus;
            int max_vcpus;
        } system;
    };
} qemu_info_t;

enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_simple_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);

void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
void qemu_plugin_outs(const char *string);

/* The API version this plugin was written against; qemu refuses to load a plugin whose version
 * lies outside the range it supports. */
PLUGIN_EXPORT int qemu_plugin_version = 1;

/* ---- the plugin -------------------------------------------------------------------------------- */
/* A plugin is a singleton inside one qemu process, and the inline op needs a fixed address to add
 * to, so the state is file-scope by necessity. */
static uint64_t insn_count;
static unsigned int vcpus_seen;
static char out_path[4096];

static void on_vcpu_init(qemu_plugin_id_t id, unsigned int vcpu_index)
{
    (void)id;
    (void)vcpu_index;
    __atomic_add_fetch(&vcpus_seen, 1u, __ATOMIC_RELAXED);
}

static void on_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &insn_count,
                                             (uint64_t)qemu_plugin_tb_n_insns(tb));
}

static void on_plugin_exit(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    char line[128];
    snprintf(line, sizeof line, "insns %" PRIu64 " vcpus %u\n", insn_count, vcpus_seen);
    if (out_path[0] != '\0') {
        FILE *f = fopen(out_path, "a");
        if (f != NULL) {
            fputs(line, f);
            fclose(f);
            return;
        }
        /* Fall through: losing the count silently would make the caller read a stale file. */
    }
    qemu_plugin_outs(line);
}

PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                      char **argv)
{
    if (info->system_emulation) {
        return -1; /* counts in system mode would include the guest kernel: not what we measure */
    }
    for (int i = 0; i < argc; ++i) {
        if (strncmp(argv[i], "out=", 4) == 0 && strlen(argv[i] + 4) < sizeof out_path) {
            strcpy(out_path, argv[i] + 4);
        } else {
            fprintf(stderr, "insn_count: unknown or too long argument '%s'\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
    qemu_plugin_register_atexit_cb(id, on_plugin_exit, NULL);
    return 0;
}
