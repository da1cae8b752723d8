/* rxe raises no affiliated asynchronous event (IBV_EVENT_QP_ACCESS_ERR) when a remote access
 * error moves the responder QP to ERR. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct pair p;
	struct ibv_wc wc;
	struct ibv_async_event ev;
	struct pollfd pfd;
	double end;

	repro_name = "no-qp-error-event";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	p = connect_pair(&d, pd, pd);
	/* A READ with a key that names nothing. */
	wc = do_rdma(&p, IBV_WR_RDMA_READ, mr, 0, 8, (uintptr_t)mr->addr, mr->rkey ^ 0x80);
	if (wc.status != IBV_WC_REM_ACCESS_ERR)
		die("the bad READ completed with %s", ibv_wc_status_str(wc.status));
	end = now_s() + 5;
	while (now_s() < end) {
		if (qp_state(p.resp) != IBV_QPS_ERR) {
			usleep(1000);
			continue;
		}
		pfd.fd = d.ctx->async_fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, 100) > 0 && ibv_get_async_event(d.ctx, &ev) == 0) {
			int hit = ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == p.resp;
			ibv_ack_async_event(&ev);
			if (hit)
				verdict(0, "QP_ACCESS_ERR for the responder QP");
		}
	}
	if (qp_state(p.resp) != IBV_QPS_ERR)
		die("the responder QP did not enter ERR");
	verdict(1, "responder QP in ERR, no QP_ACCESS_ERR event in 5 s");
}
