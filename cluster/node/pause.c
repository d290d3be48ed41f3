/* The pod sandbox's one process, as Kubernetes' own pause: it holds the pod's
 * namespaces open, reaps zombies, and exits on SIGINT or SIGTERM. Built
 * statically by cluster/node/up.sh into a one-file image, so the node needs
 * no registry for its sandbox image. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void sigdown(int signo) { (void)signo; _exit(0); }
static void sigreap(int signo) { (void)signo; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
	struct sigaction down = {.sa_handler = sigdown}, reap = {.sa_handler = sigreap, .sa_flags = SA_NOCLDSTOP};
	if (sigaction(SIGINT, &down, NULL) < 0 || sigaction(SIGTERM, &down, NULL) < 0 || sigaction(SIGCHLD, &reap, NULL) < 0)
		return 1;
	for (;;)
		pause();
}
