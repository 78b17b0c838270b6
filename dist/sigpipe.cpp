// SIGPIPE blocking for Gloo's writers (see sigpipe.hpp).
#include "kiln/dist/sigpipe.hpp"

#include <pthread.h>

#include <ctime>

namespace kiln::dist::detail {
namespace {

sigset_t only_sigpipe() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGPIPE);
  return s;
}

}  // namespace

void block_sigpipe() {
  const sigset_t s = only_sigpipe();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

SigpipeBlock::SigpipeBlock() {
  const sigset_t s = only_sigpipe();
  pthread_sigmask(SIG_BLOCK, &s, &old_);
}

SigpipeBlock::~SigpipeBlock() {
  if (sigismember(&old_, SIGPIPE) == 0) {
    const sigset_t s = only_sigpipe();
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      sigtimedwait(&s, nullptr, &zero);
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace kiln::dist::detail
