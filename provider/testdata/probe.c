/*
 * probe: a small libfabric program the provider tests run (provider_test.go).
 *   probe getinfo PROV    fi_getinfo with hints prov_name=PROV ("-": none)
 *   probe twoshims A B    dlopen two copies of libxdpfab-fi.so, ask both
 *   probe fork            load xdpfab, fork, use other providers in the child
 * Each prints key=value facts about the process: how many threads it has,
 * whether the Go part is mapped, which signals have handlers.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>

static int threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	if (d)
		closedir(d);
	return n;
}

/* Distinct paths of libxdpfab-go.so mapped into the process. */
static int go_copies(void)
{
	char line[4096], seen[8][4096];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');
		if (!p || !strstr(p, "libxdpfab-go.so"))
			continue;
		p[strcspn(p, "\n")] = 0;
		int dup = 0;
		for (int i = 0; i < n; i++)
			dup |= !strcmp(seen[i], p);
		if (!dup && n < 8)
			strcpy(seen[n++], p);
	}
	if (f)
		fclose(f);
	return n;
}

static int handled(int sig)
{
	struct sigaction sa;

	if (sigaction(sig, NULL, &sa))
		return -1;
	return (sa.sa_flags & SA_SIGINFO) ? 1 : (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN);
}

static void facts(const char *tag, int ret)
{
	printf("%s ret=%d threads=%d go=%d sigurg=%d sigprof=%d sigsegv=%d sigpipe=%d\n", tag, ret,
	       threads(), go_copies(), handled(SIGURG), handled(SIGPROF), handled(SIGSEGV),
	       handled(SIGPIPE));
	fflush(stdout);
}

static int getinfo(const char *prov)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	int ret;

	if (prov && strcmp(prov, "-"))
		hints->fabric_attr->prov_name = strdup(prov);
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	if (!ret)
		fi_freeinfo(info);
	fi_freeinfo(hints);
	return ret;
}

static int twoshims(const char *a, const char *b)
{
	const char *paths[2] = {a, b};
	int ret = 0;

	for (int i = 0; i < 2; i++) {
		void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			printf("dlopen %s: %s\n", paths[i], dlerror());
			return 2;
		}
		struct fi_provider *(*ini)(void) = (struct fi_provider * (*)(void)) dlsym(h, "fi_prov_ini");
		struct fi_provider *p = ini();
		struct fi_info *hints = fi_allocinfo(), *info = NULL;
		int r = p->getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
		if (!r)
			fi_freeinfo(info);
		fi_freeinfo(hints);
		printf("shim%d getinfo=%d\n", i, r);
		ret |= r;
	}
	facts("twoshims", ret);
	return 0;
}

static int forktest(void)
{
	int ret = getinfo("xdpfab");
	facts("parent-before", ret);
	pid_t pid = fork();
	if (pid == 0) {
		alarm(20);
		int x = getinfo("xdpfab");
		int t = getinfo("tcp");
		printf("child xdpfab=%d tcp=%d\n", x, t);
		fflush(stdout);
		_exit(x == -FI_ENODATA && t == 0 ? 0 : 1);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	printf("child-status exited=%d code=%d signaled=%d\n", WIFEXITED(status),
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status));
	facts("parent-after", getinfo("xdpfab"));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "getinfo")) {
		facts("before", 0);
		facts("after", getinfo(argv[2]));
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "twoshims"))
		return twoshims(argv[2], argv[3]);
	if (argc >= 2 && !strcmp(argv[1], "fork"))
		return forktest();
	fprintf(stderr, "usage: probe getinfo PROV | twoshims A B | fork\n");
	return 2;
}
