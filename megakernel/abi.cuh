// GENERATED from src/isa/mod.rs by mk. Do not edit.
#pragma once
#define OP_EMBED 1
#define OP_GEMV_NORM 2
#define OP_GEMV_GATE_UP 3
#define OP_GEMV_RESIDUAL 5
#define OP_REDUCE_STORE 6
#define OP_REDUCE_RESIDUAL 7
#define OP_GDN_CONV 8
#define OP_GDN_RECUR 9
#define OP_ATTN_KV 10
#define OP_ATTN_SCORES 11
#define OP_ATTN_PV 12
#define OP_ATTN_REDUCE_GATE 13
#define OP_LM_HEAD 14
#define OP_ARGMAX 15
#define OP_END_STEP 16
#define OP_GDN_STEP 17
#define OP_MTP_FC 18
#define OP_GDN_CHUNK 19
#define SLOT_W0 0
#define SLOT_W1 1
#define SLOT_W2 2
#define SLOT_IN0 3
#define SLOT_IN1 4
#define SLOT_IN2 5
#define SLOT_OUT0 6
#define SLOT_OUT1 7
#define SLOT_ST0 8
#define SLOT_ST1 9
#define SLOT_W3 10
#define SLOT_IN3 11
#define SLOT_IN4 12
#define OPERAND_NONE 65535u
#define NO_COUNTER 4294967295u
#define FLAG_PARTIAL 1u
#define FLAG_ROW_UNITS 2u
#define FLAG_LAST_ROW 4u
struct Word {
  unsigned short opcode, layer;
  unsigned char m_rows, flags;
  unsigned short unit_rows;
  unsigned int rows, units, wait, wait_target, signal;
  unsigned short k_parts;
  unsigned short ops[13];
  unsigned int arg0, arg1;
};
static_assert(sizeof(Word) == 64, "instruction word is 64 bytes");
// GENERATED from src/exec/gpu/abi.rs: constants and structs the host shares.
#define THREADS 256
#define KGROUP 1024
#define ATTN_PART 256
#define CTRL_LEN 4
#define CTRL_COMMIT 3
#define GDN_HIST_HEAD 258
#define MAX_GROUP 8
#define SAMPLE_MAX 2048
#define SAMPLE_CAP 4096
#define COLLECT_THREADS 256
#define SB_STATUS 6
#define SB_KEPT 7
#define SB_COUNT 8
#define SB_HI 256
#define SB_FULL 512
#define SB_CANDS 66048
#define SB_WORDS 70144
#define MEGA_BLOCKS_PER_SM 2
#define MROW_X_BYTES 98304
struct DevCtx {
  void* const* bufs;
  const float* const* scales;
  const unsigned* rows;
  const unsigned* cols;
  const unsigned char* wbytes;
  const float* rope;
  unsigned* stop;
  unsigned* tickets;
  unsigned long long* stamps;
  const unsigned* unit_base;
  unsigned* sampler;
  unsigned rotary_dim;
  unsigned head_dim;
  unsigned gdn_dim;
  unsigned n_heads;
  unsigned n_kv_heads;
  unsigned gdn_k_heads;
  unsigned gdn_v_heads;
  unsigned max_ctx;
  float eps;
  unsigned n_bufs;
  unsigned long long reserved;
};
static_assert(sizeof(DevCtx) == 136, "DevCtx as src/exec/gpu/abi.rs lays it out");
struct MkCtl {
  unsigned* counters;
  unsigned* next;
  unsigned* error;
  unsigned long long timeout_ns;
  unsigned long long* stamps;
  const unsigned* unit_base;
  const unsigned* wait_stride;
  unsigned* step_done;
  unsigned* tokens;
  unsigned n_steps;
};
static_assert(sizeof(MkCtl) == 80, "MkCtl as src/exec/gpu/abi.rs lays it out");
