// SIGPIPE and Gloo. Gloo's TCP transport writes with writev, without
// MSG_NOSIGNAL: a write to a peer that just died raises SIGPIPE, whose default
// action kills this process instead of letting Gloo report the error. Rather
// than ignore SIGPIPE for the whole application, dist blocks it in the threads
// that write to Gloo's sockets: the communication thread, Gloo's event-loop
// thread (it inherits the mask of the thread that creates the device, so the
// device is created inside a SigpipeBlock) and the caller's thread while it
// connects. A SIGPIPE raised by a write is sent to the writing thread, so a
// blocked one stays pending there and the write fails with EPIPE. Internal to
// libkiln_dist.
#pragma once

#include <signal.h>

namespace kiln::dist::detail {

// Blocks SIGPIPE in this thread for the rest of its life.
void block_sigpipe();

// Blocks SIGPIPE in this thread for the scope; on exit takes back any SIGPIPE
// raised meanwhile (if it was not blocked before) and restores the mask.
class SigpipeBlock {
 public:
  SigpipeBlock();
  ~SigpipeBlock();
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t old_;
};

}  // namespace kiln::dist::detail
