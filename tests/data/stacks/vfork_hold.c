#include <unistd.h>
/* Called through ctypes by fake_rank.py --hold-lib: the caller sits in vfork's killable wait
   (state D) until the child dies; the child only runs pause() in C, below the caller's frame. */
int hold_in_vfork(void) { pid_t p = vfork(); if (p == 0) { pause(); _exit(0); } return (int)p; }
