/*
 * setname: fi_setname on an xdpfab RDM endpoint through libfabric
 * (setname_test.go runs it on loopback). Before fi_enable the endpoint
 * moves to the port asked for and fi_getname reports it; another IP
 * fails with FI_EADDRNOTAVAIL, a malformed address with FI_EINVAL, and
 * after fi_enable FI_EOPBADSTATE.
 *
 * Prints "ok" and exits 0, or says what is wrong and exits 1.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "check.h"

/* free_port returns a loopback UDP port that was free a moment ago. */
static unsigned short free_port(void)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) || getsockname(fd, (struct sockaddr *)&sin, &len)) {
		perror("free_port");
		exit(1);
	}
	close(fd);
	return ntohs(sin.sin_port);
}

int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fi_av_attr av_attr = {.type = FI_AV_MAP};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE};
	struct sockaddr_in sin, got;
	size_t len = sizeof(got);
	unsigned short port;

	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_RDM;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup("xdpfab");
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &info));
	fi_freeinfo(hints);
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &dom, NULL));
	CHECK(fi_endpoint(dom, info, &ep, NULL));

	port = free_port();
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(fi_setname(&ep->fid, &sin, sizeof(sin)));
	CHECK(fi_getname(&ep->fid, &got, &len));
	if (len != sizeof(got) || ntohs(got.sin_port) != port || got.sin_addr.s_addr != htonl(INADDR_LOOPBACK)) {
		fprintf(stderr, "fi_getname after fi_setname: port %u, want %u\n", ntohs(got.sin_port), port);
		return 1;
	}

	ERRNO(fi_setname(&ep->fid, &sin, sizeof(sin) - 1), FI_EINVAL);
	ERRNO(fi_setname(&ep->fid, NULL, sizeof(sin)), FI_EINVAL);
	sin.sin_addr.s_addr = htonl(0x7f000002); /* 127.0.0.2: not the endpoint's */
	ERRNO(fi_setname(&ep->fid, &sin, sizeof(sin)), FI_EADDRNOTAVAIL);

	CHECK(fi_av_open(dom, &av_attr, &av, NULL));
	CHECK(fi_cq_open(dom, &cq_attr, &cq, NULL));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons(free_port());
	ERRNO(fi_setname(&ep->fid, &sin, sizeof(sin)), FI_EOPBADSTATE);

	CHECK(fi_close(&ep->fid));
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&av->fid));
	CHECK(fi_close(&dom->fid));
	CHECK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	printf("ok\n");
	return 0;
}
