// The launcher of the CUDA emulation (see emu.h and README.md): runs a kernel over a grid on the
// CPU.
//
// Blocks are spread over a pool of OS threads, each taking the next block index from an atomic
// counter; the caller of minfer_emu_launch works as one of them. Within a block every CUDA
// thread is a fiber with its own stack; the OS thread's scheduler resumes the fibers one after
// the other, each running until it waits at a barrier or returns, and releases a barrier once
// every live thread it covers has arrived. When no fiber can run and the block is not done, the
// block deadlocks: the launch fails with a message instead of hanging.
//
// Scheduling order, per block: warp by warp, each warp's lanes run in turn until all of them
// wait at __syncthreads (or have returned), the warp's barrier (__syncwarp, shuffles, votes)
// being released whenever all its live lanes have arrived; then the block barrier is released
// and the round starts again. Within a pass over a warp, a lane that stops switches straight to
// the next runnable lane, so a barrier costs one context switch per thread.
//
// A warp's exchange slots are double-buffered by barrier generation, so a shuffle costs one
// barrier: a lane can only overwrite its slot of generation g + 2 after every lane has passed
// generation g + 1, that is, after every lane has read generation g.

#include "emu.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

// Under valgrind, fiber stacks are registered as stacks, so that switching to one is not taken
// for a wild stack pointer. (The client requests cost a few instructions otherwise.)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define MINFER_EMU_STACK_REGISTER(lo, hi) VALGRIND_STACK_REGISTER(lo, hi)
#define MINFER_EMU_STACK_DEREGISTER(id) VALGRIND_STACK_DEREGISTER(id)
#else
#define MINFER_EMU_STACK_REGISTER(lo, hi) 0u
#define MINFER_EMU_STACK_DEREGISTER(id) ((void)(id))
#endif

// MINFER_EMU_UCONTEXT forces the portable context switch (say, for tools that follow
// swapcontext but not hand-written stack switches).
#if defined(__x86_64__) && !defined(MINFER_EMU_UCONTEXT)
#define MINFER_EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

// The built-in variables (declared by emu.h), per OS thread.
__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread dim3 blockDim;
__thread dim3 gridDim;

namespace minfer_emu {
namespace {

// Layout-identical to the kernels' `struct Params` (cuda/common.cuh), which this file cannot see.
struct EmuParams {
    unsigned long long b[8];
    unsigned int w[16];
};
static_assert(sizeof(EmuParams) == 128, "Params is 128 bytes");
using KernelFn = void (*)(EmuParams);

constexpr unsigned kWarpSize = 32;
constexpr unsigned kMaxBlockThreads = 1024;
constexpr unsigned kMaxWarps = kMaxBlockThreads / kWarpSize;

// Bytes of each fiber's stack (the guard page below it not included): MINFER_EMU_STACK_KIB,
// default 64 KiB.
size_t fiber_stack_bytes() {
    static const size_t bytes = [] {
        size_t kib = 64;
        if (const char* s = std::getenv("MINFER_EMU_STACK_KIB")) {
            long v = std::strtol(s, nullptr, 10);
            if (v >= 16) kib = (size_t)v;
        }
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        return (kib * 1024 + page - 1) / page * page;
    }();
    return bytes;
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

// ---------------------------------------------------------------------------------------------
// Context switching.
//
// On x86-64 a switch saves the callee-saved registers on the current stack, swaps stack
// pointers and restores them from the other stack: no system call (ucontext's swapcontext makes
// one, sigprocmask, per switch). The FPU control words are not switched: the fibers of a launch
// share one floating-point environment. Elsewhere, the portable ucontext.
// ---------------------------------------------------------------------------------------------

#if defined(MINFER_EMU_ASM_SWITCH)

extern "C" {
// Saves the current context on its stack, stores its stack pointer in *save_sp, and resumes the
// context whose stack pointer is load_sp.
__attribute__((visibility("hidden"))) void minfer_emu_ctx_switch(void** save_sp, void* load_sp);
// First code of a fresh fiber: calls the function in r12, which never returns.
__attribute__((visibility("hidden"))) void minfer_emu_ctx_start();
}

asm(R"(
    .text
    .p2align 4
    .globl minfer_emu_ctx_switch
    .hidden minfer_emu_ctx_switch
    .type minfer_emu_ctx_switch, @function
minfer_emu_ctx_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size minfer_emu_ctx_switch, .-minfer_emu_ctx_switch

    .p2align 4
    .globl minfer_emu_ctx_start
    .hidden minfer_emu_ctx_start
    .type minfer_emu_ctx_start, @function
minfer_emu_ctx_start:
    .cfi_startproc
    .cfi_undefined rip
    callq *%r12
    ud2
    .cfi_endproc
    .size minfer_emu_ctx_start, .-minfer_emu_ctx_start
)");

struct Context {
    void* sp = nullptr;
};

inline void ctx_switch(Context& from, Context& to) { minfer_emu_ctx_switch(&from.sp, to.sp); }

// Prepares `c` to run fn() on the stack [base, base + size).
void ctx_make(Context& c, char* base, size_t size, void (*fn)()) {
    // Popped by the first switch into it: r15, r14, r13, r12 = fn, rbx, rbp, then the return
    // address minfer_emu_ctx_start. The stack pointer ends 16-byte aligned at the top, so fn
    // is entered with the ABI's alignment after minfer_emu_ctx_start's call.
    uintptr_t top = ((uintptr_t)(base + size) & ~(uintptr_t)15) - 16;
    void** sp = (void**)(top - 7 * sizeof(void*));
    sp[0] = sp[1] = sp[2] = nullptr; // r15, r14, r13
    sp[3] = (void*)fn;               // r12
    sp[4] = sp[5] = nullptr;         // rbx, rbp
    sp[6] = (void*)&minfer_emu_ctx_start;
    c.sp = sp;
}

#else

struct Context {
    ucontext_t uc;
};

inline void ctx_switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }

void ctx_make(Context& c, char* base, size_t size, void (*fn)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = base;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, fn, 0);
}

#endif

// ---------------------------------------------------------------------------------------------
// Launch state.
// ---------------------------------------------------------------------------------------------

// One launch, shared by the OS threads that run its blocks.
struct Job {
    KernelFn kernel;
    EmuParams params;
    dim3 grid, block;
    unsigned threads;         // per block
    unsigned long long blocks; // in the grid
    std::atomic<unsigned long long> next{0};
    std::atomic<bool> failed{false};
    std::mutex error_mu;
    int error_code = MINFER_EMU_OK;
    std::string error;

    // Keeps the first failure; the others are consequences or repeats.
    void fail(int code, std::string msg) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error_code == MINFER_EMU_OK) {
            error_code = code;
            error = std::move(msg);
        }
        failed.store(true, std::memory_order_relaxed);
    }
};

enum class State : unsigned char { Runnable, AtWarpBarrier, AtBlockBarrier, Done };

struct Fiber {
    Context ctx;
    uint3 tid;
    unsigned warp, lane;
    State state;
};

struct Warp {
    unsigned live_mask;    // lanes that exist and have not returned
    unsigned arrived_mask; // lanes waiting at the warp barrier
    unsigned mask_and;     // the intersection of the masks they passed
    unsigned lane_mask[kWarpSize]; // each one's
    unsigned long long gen; // barrier generation: how many times it was released
    struct Bank {
        unsigned long long slot[kWarpSize];
    } bank[2]; // bank[gen & 1] is written in generation gen
};

struct Block {
    unsigned live;    // threads that have not returned
    unsigned arrived; // threads waiting at __syncthreads
    unsigned long long gen;
    BlockVote vote[2]; // vote[gen & 1] is counted in generation gen
};

// Thrown inside a fiber to abort the launch with MINFER_EMU_ERR_KERNEL; caught by the fiber's
// entry function, on the fiber's own stack.
struct KernelFailure {
    std::string what;
};

// What one OS thread needs to run blocks: fibers with their stacks (kept across blocks and
// launches, grown to the largest block seen), the block's barrier state, the scheduler context.
class Worker {
  public:
    ~Worker() {
        for (size_t i = 0; i < stacks_.size(); ++i) {
            MINFER_EMU_STACK_DEREGISTER(stack_ids_[i]);
            munmap(stacks_[i], stack_bytes_ + page_);
        }
    }

    // Runs the blocks of `job` until none is left or the launch has failed.
    void run(Job& job) {
        job_ = &job;
        blockDim = job.block;
        gridDim = job.grid;
        if (!reserve(job.threads)) {
            job.fail(MINFER_EMU_ERR_SYSTEM,
                     format("cannot allocate %u fiber stacks of %zu bytes", job.threads,
                            stack_bytes_));
            return;
        }
        const unsigned long long gx = job.grid.x, gxy = gx * job.grid.y;
        while (!job.failed.load(std::memory_order_relaxed)) {
            unsigned long long b = job.next.fetch_add(1, std::memory_order_relaxed);
            if (b >= job.blocks) break;
            blockIdx = uint3{(unsigned)(b % gx), (unsigned)(b % gxy / gx), (unsigned)(b / gxy)};
            run_block();
        }
        job_ = nullptr;
    }

    // The calling fiber's side of the barriers (see emu.h).
    WarpView warp_exchange(unsigned mask, unsigned long long bits) {
        Fiber& f = *current_;
        Warp& w = warps_[f.warp];
        const unsigned long long gen = w.gen;
        w.bank[gen & 1].slot[f.lane] = bits;
        w.arrived_mask |= 1u << f.lane;
        w.mask_and &= mask; // checked at the release, when the lanes that exit have exited
        w.lane_mask[f.lane] = mask;
        wait(State::AtWarpBarrier);
        // Released: present_ holds the lanes that arrived in generation gen.
        return WarpView{w.bank[gen & 1].slot, present_[f.warp][gen & 1], f.lane};
    }

    unsigned active_lanes() const { return warps_[current_->warp].live_mask; }

    BlockVote sync_block(int pred) {
        const unsigned long long gen = block_.gen;
        block_.vote[gen & 1].count += pred != 0;
        block_.vote[gen & 1].arrived += 1;
        block_.arrived += 1;
        wait(State::AtBlockBarrier);
        return block_.vote[gen & 1];
    }

    bool in_fiber() const { return current_ != nullptr; }

  private:
    // Makes sure `n` fibers have stacks.
    bool reserve(unsigned n) {
        if (!page_) {
            page_ = (size_t)sysconf(_SC_PAGESIZE);
            stack_bytes_ = fiber_stack_bytes();
        }
        while (stacks_.size() < n) {
            // A guard page below each stack turns an overflow into a fault, not corruption.
            void* p = mmap(nullptr, stack_bytes_ + page_, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) return false;
            if (mprotect(p, page_, PROT_NONE) != 0) {
                munmap(p, stack_bytes_ + page_);
                return false;
            }
            stacks_.push_back((char*)p);
            char* lo = (char*)p + page_;
            stack_ids_.push_back(MINFER_EMU_STACK_REGISTER(lo, lo + stack_bytes_));
        }
        return true;
    }

    // Parks the current fiber in `state` and passes on (see pass_on); returns when resumed.
    void wait(State state) {
        Fiber& f = *current_;
        f.state = state;
        pass_on(f);
    }

    // Starts a pass over a warp at its first runnable lane, `f`: returns when every lane that
    // was runnable has run until it waits or returns (see pass_on).
    void resume(Fiber& f) {
        current_ = &f;
        threadIdx = f.tid;
        ctx_switch(sched_, f.ctx);
        current_ = nullptr;
    }

    // Leaves fiber `f`, which has stopped: switches straight to the next runnable lane of its
    // warp, so that a pass costs one switch per lane, or back to the scheduler after the last
    // one (or after a failure).
    void pass_on(Fiber& f) {
        if (!failed_) {
            Fiber* lanes = &fibers_[f.warp * kWarpSize];
            // Lanes above f's (none for lane 31: 2u << 31 wraps to 0).
            unsigned rest = warps_[f.warp].live_mask & ~((2u << f.lane) - 1);
            for (; rest; rest &= rest - 1) {
                Fiber& next = lanes[__builtin_ctz(rest)];
                if (next.state != State::Runnable) continue;
                current_ = &next;
                threadIdx = next.tid;
                ctx_switch(f.ctx, next.ctx);
                return;
            }
        }
        ctx_switch(f.ctx, sched_);
    }

    // Where every fiber starts: runs the kernel, reports a failure, and leaves for good.
    static void fiber_main();

    // Releases warp wi's barrier, which all its live lanes have reached; false (and the launch
    // failed) if one passed a mask that leaves out a live lane: partial masks are not emulated.
    bool release_warp(unsigned wi) {
        Warp& w = warps_[wi];
        if ((w.mask_and & w.live_mask) != w.live_mask) {
            unsigned lane = 0; // the first lane that passed such a mask
            while (!(w.arrived_mask >> lane & 1) ||
                   (w.lane_mask[lane] & w.live_mask) == w.live_mask)
                ++lane;
            const Fiber& f = fibers_[wi * kWarpSize + lane];
            job_->fail(MINFER_EMU_ERR_KERNEL,
                       format("thread (%u,%u,%u) of block (%u,%u,%u): warp operation with mask "
                              "0x%08x while the warp's live lanes are 0x%08x: partial masks are "
                              "not emulated (a mask must cover every lane that has not returned)",
                              f.tid.x, f.tid.y, f.tid.z, blockIdx.x, blockIdx.y, blockIdx.z,
                              w.lane_mask[lane], w.live_mask));
            return false;
        }
        present_[wi][w.gen & 1] = w.arrived_mask;
        for (unsigned m = w.arrived_mask; m; m &= m - 1)
            fibers_[wi * kWarpSize + __builtin_ctz(m)].state = State::Runnable;
        w.arrived_mask = 0;
        w.mask_and = ~0u;
        w.gen += 1;
        return true;
    }

    void release_block() {
        for (unsigned i = 0; i < job_->threads; ++i)
            if (fibers_[i].state == State::AtBlockBarrier) fibers_[i].state = State::Runnable;
        block_.arrived = 0;
        block_.gen += 1;
        // Every thread has read the previous generation's vote: it is the next one's to count.
        block_.vote[block_.gen & 1] = BlockVote{0, 0};
    }

    void run_block() {
        const Job& job = *job_;
        const unsigned n = job.threads, bx = job.block.x, bxy = bx * job.block.y;
        const unsigned nwarps = (n + kWarpSize - 1) / kWarpSize;
        for (unsigned i = 0; i < n; ++i) {
            Fiber& f = fibers_[i];
            f.tid = uint3{i % bx, i % bxy / bx, i / bxy};
            f.warp = i / kWarpSize;
            f.lane = i % kWarpSize;
            f.state = State::Runnable;
            ctx_make(f.ctx, stacks_[i] + page_, stack_bytes_, &fiber_main);
        }
        for (unsigned wi = 0; wi < nwarps; ++wi) {
            unsigned lanes = std::min(kWarpSize, n - wi * kWarpSize);
            warps_[wi].live_mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
            warps_[wi].arrived_mask = 0;
            warps_[wi].mask_and = ~0u;
            warps_[wi].gen = 0;
        }
        block_ = Block{n, 0, 0, {BlockVote{0, 0}, BlockVote{0, 0}}};

        for (;;) {
            bool progressed = false;
            for (unsigned wi = 0; wi < nwarps; ++wi) {
                Warp& w = warps_[wi];
                Fiber* lanes = &fibers_[wi * kWarpSize];
                // Run the warp until every live lane waits at __syncthreads. A pass runs each
                // runnable lane in lane order until it stops, the lanes switching to each other.
                while (w.live_mask) {
                    Fiber* first = nullptr;
                    for (unsigned m = w.live_mask; m && !first; m &= m - 1) {
                        Fiber& f = lanes[__builtin_ctz(m)];
                        if (f.state == State::Runnable) first = &f;
                    }
                    if (first) {
                        resume(*first);
                        progressed = true;
                        if (failed_) return abandon_block();
                    }
                    if (w.arrived_mask && w.arrived_mask == w.live_mask) {
                        if (!release_warp(wi)) return;
                    } else if (!first) {
                        break;
                    }
                }
            }
            if (block_.live == 0) return;
            if (block_.arrived == block_.live) {
                release_block();
            } else if (!progressed) {
                return deadlock();
            }
        }
    }

    // After a failure inside a fiber: the block's other fibers are dropped where they wait
    // (their stacks are reinitialised for the next block, and no destructor of theirs runs).
    void abandon_block() {
        failed_ = false;
        job_->fail(failure_code_, std::move(failure_));
    }

    void deadlock() {
        const unsigned n = job_->threads;
        unsigned at_block = 0, at_warp = 0;
        int first_block = -1, first_warp = -1;
        for (unsigned i = 0; i < n; ++i) {
            if (fibers_[i].state == State::AtBlockBarrier) {
                at_block++;
                if (first_block < 0) first_block = (int)i;
            } else if (fibers_[i].state == State::AtWarpBarrier) {
                at_warp++;
                if (first_warp < 0) first_warp = (int)i;
            }
        }
        std::string msg = format(
            "deadlock in block (%u,%u,%u): of %u live threads (%u returned), %u wait at "
            "__syncthreads and %u at a warp barrier (__syncwarp, shuffle or vote)",
            blockIdx.x, blockIdx.y, blockIdx.z, block_.live, n - block_.live, at_block, at_warp);
        if (first_block >= 0 && first_warp >= 0)
            msg += format("; e.g. linear thread %d at __syncthreads, %d at a warp barrier",
                          first_block, first_warp);
        job_->fail(MINFER_EMU_ERR_DEADLOCK, std::move(msg));
    }

    Job* job_ = nullptr;
    Context sched_;
    Fiber* current_ = nullptr;
    Fiber fibers_[kMaxBlockThreads];
    Warp warps_[kMaxWarps];
    unsigned present_[kMaxWarps][2]; // lanes that took part in each warp's last two generations
    Block block_;
    bool failed_ = false; // set by a fiber that failed, for the scheduler
    int failure_code_ = MINFER_EMU_OK;
    std::string failure_;
    std::vector<char*> stacks_; // each: a guard page, then stack_bytes_
    std::vector<unsigned> stack_ids_; // valgrind's ids of the stacks
    size_t page_ = 0, stack_bytes_ = 0;
};

// The OS thread's worker, created on first use and freed with the thread.
thread_local std::unique_ptr<Worker> t_worker_owner;
__thread Worker* t_worker = nullptr;

Worker& this_worker() {
    if (!t_worker) {
        t_worker_owner.reset(new Worker);
        t_worker = t_worker_owner.get();
    }
    return *t_worker;
}

// Runs the kernel as the current fiber; returns MINFER_EMU_OK, or an error code with `what` set.
int run_kernel(const Job& job, std::string& what) {
    try {
        job.kernel(job.params);
        return MINFER_EMU_OK;
    } catch (KernelFailure& e) {
        what = std::move(e.what);
    } catch (const std::exception& e) {
        what = format("exception: %s", e.what());
    } catch (...) {
        what = "unknown exception";
    }
    return MINFER_EMU_ERR_KERNEL;
}

void Worker::fiber_main() {
    Worker& self = *t_worker;
    Fiber& f = *self.current_;
    {
        // Scoped: nothing of this frame that owns memory may outlive the final switch below.
        std::string what;
        int code = run_kernel(*self.job_, what);
        if (code != MINFER_EMU_OK) {
            self.failed_ = true;
            self.failure_code_ = code;
            self.failure_ = format("thread (%u,%u,%u) of block (%u,%u,%u): ", f.tid.x, f.tid.y,
                                   f.tid.z, blockIdx.x, blockIdx.y, blockIdx.z) +
                            what;
        }
    }
    f.state = State::Done;
    self.warps_[f.warp].live_mask &= ~(1u << f.lane);
    self.block_.live -= 1;
    self.pass_on(f);
    std::abort(); // a finished fiber is never resumed
}

// Aborts with a message when a device function runs outside a launch (say, a kernel called
// directly): there is no block to synchronise with.
Worker& fiber_worker(const char* what) {
    if (!t_worker || !t_worker->in_fiber()) {
        std::fprintf(stderr, "minfer-emu: %s called outside minfer_emu_launch\n", what);
        std::abort();
    }
    return *t_worker;
}

// ---------------------------------------------------------------------------------------------
// The pool of OS threads.
// ---------------------------------------------------------------------------------------------

// Runs blocks of `job` on the calling OS thread; never throws (a launch must not return while
// other threads still run its blocks).
void run_blocks(Job& job) noexcept {
    try {
        this_worker().run(job);
    } catch (const std::exception& e) {
        job.fail(MINFER_EMU_ERR_SYSTEM, format("cannot run blocks: %s", e.what()));
    }
}

class Pool {
  public:
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            quit_ = true;
        }
        work_cv_.notify_all();
        for (std::thread& t : threads_) t.join();
    }

    void set_threads(unsigned n) { wanted_.store(n, std::memory_order_relaxed); }

    // Runs `job` on the caller and as many helpers as are wanted and useful.
    void run(Job& job) {
        std::lock_guard<std::mutex> launch(launch_mu_);
        unsigned want = wanted_.load(std::memory_order_relaxed);
        if (want == 0) want = std::max(1u, std::thread::hardware_concurrency());
        unsigned long long helpers = std::min<unsigned long long>(want - 1, job.blocks - 1);
        try {
            while (threads_.size() < helpers) {
                unsigned index = (unsigned)threads_.size();
                threads_.emplace_back([this, index] { helper(index); });
            }
        } catch (const std::exception&) {
            helpers = threads_.size(); // run with the helpers there are
        }
        if (helpers) {
            std::lock_guard<std::mutex> lock(mu_);
            job_ = &job;
            job_helpers_ = (unsigned)helpers;
            busy_ = (unsigned)helpers;
            seq_ += 1;
        }
        if (helpers) work_cv_.notify_all();
        run_blocks(job);
        if (helpers) {
            std::unique_lock<std::mutex> lock(mu_);
            done_cv_.wait(lock, [this] { return busy_ == 0; });
            job_ = nullptr;
        }
    }

  private:
    void helper(unsigned index) {
        unsigned long long seen = 0;
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            work_cv_.wait(lock, [&] { return quit_ || seq_ != seen; });
            if (quit_) return;
            seen = seq_;
            if (index >= job_helpers_) continue;
            Job* job = job_;
            lock.unlock();
            run_blocks(*job);
            lock.lock();
            if (--busy_ == 0) done_cv_.notify_all();
        }
    }

    std::mutex launch_mu_; // one launch at a time
    std::atomic<unsigned> wanted_{0};
    std::mutex mu_;
    std::condition_variable work_cv_, done_cv_;
    std::vector<std::thread> threads_;
    Job* job_ = nullptr;
    unsigned job_helpers_ = 0; // helpers [0, job_helpers_) take part in the current job
    unsigned busy_ = 0;        // of those, the ones still running it
    unsigned long long seq_ = 0;
    bool quit_ = false;
};

Pool& pool() {
    static Pool p;
    return p;
}

thread_local std::string t_error;

int launch_error(int code, std::string msg) {
    t_error = std::move(msg);
    return code;
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Device-side entry points (declared in emu.h).
// ---------------------------------------------------------------------------------------------

WarpView warp_exchange(unsigned mask, unsigned long long bits) {
    return fiber_worker("a warp operation").warp_exchange(mask, bits);
}

unsigned active_lanes() { return fiber_worker("__activemask").active_lanes(); }

BlockVote sync_block(int pred) { return fiber_worker("__syncthreads").sync_block(pred); }

void fail(const char* what) {
    fiber_worker(what);
    throw KernelFailure{what};
}

} // namespace minfer_emu

// ---------------------------------------------------------------------------------------------
// C ABI.
// ---------------------------------------------------------------------------------------------

extern "C" int minfer_emu_launch(void* kernel, const unsigned grid[3], const unsigned block[3],
                                 const void* params) {
    using namespace minfer_emu;
    if (!kernel || !grid || !block || !params)
        return launch_error(MINFER_EMU_ERR_CONFIG, "null kernel, grid, block or params");
    // CUDA's limits (compute capability 5.0 and later).
    const unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[0] > 0x7fffffffu ||
        grid[1] > 65535 || grid[2] > 65535)
        return launch_error(MINFER_EMU_ERR_CONFIG,
                            format("invalid grid (%u,%u,%u)", grid[0], grid[1], grid[2]));
    if (threads == 0 || block[0] > 1024 || block[1] > 1024 || block[2] > 64 ||
        threads > kMaxBlockThreads)
        return launch_error(
            MINFER_EMU_ERR_CONFIG,
            format("invalid block (%u,%u,%u): at most 1024 threads, (1024,1024,64) per dimension",
                   block[0], block[1], block[2]));
    if (t_worker && t_worker->in_fiber())
        return launch_error(MINFER_EMU_ERR_CONFIG, "launch from inside a kernel");

    Job job;
    job.kernel = reinterpret_cast<KernelFn>(kernel);
    std::memcpy(&job.params, params, sizeof(EmuParams));
    job.grid = dim3(grid[0], grid[1], grid[2]);
    job.block = dim3(block[0], block[1], block[2]);
    job.threads = (unsigned)threads;
    job.blocks = (unsigned long long)grid[0] * grid[1] * grid[2];
    try {
        pool().run(job);
    } catch (const std::exception& e) {
        return launch_error(MINFER_EMU_ERR_SYSTEM, format("launch failed: %s", e.what()));
    }
    if (job.error_code != MINFER_EMU_OK) return launch_error(job.error_code, std::move(job.error));
    t_error.clear();
    return MINFER_EMU_OK;
}

extern "C" const char* minfer_emu_error(void) { return minfer_emu::t_error.c_str(); }

extern "C" void minfer_emu_set_threads(unsigned n) { minfer_emu::pool().set_threads(n); }
