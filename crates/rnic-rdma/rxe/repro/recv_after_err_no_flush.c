/* A receive posted to a QP that is already in ERR never completes: rxe's provider only writes
 * it into the queue it shares with the kernel, and nothing runs the responder that would flush
 * it. (rnic-rdma works around this: on rxe it modifies such a QP to ERR again.) */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct pair p;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	struct ibv_wc wc;

	repro_name = "recv-after-err-no-flush";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE);
	p = connect_pair(&d, pd, pd);
	CHECK(!ibv_modify_qp(p.req, &a, IBV_QP_STATE), "modify ERR");
	usleep(100000);
	post_recv(p.req, mr, 0, 64, 3);
	if (poll_one(p.req_rcq, &wc, 3))
		verdict(0, "flushed: %s", ibv_wc_status_str(wc.status));
	/* The workaround: another modify to ERR runs the responder, which flushes it. */
	CHECK(!ibv_modify_qp(p.req, &a, IBV_QP_STATE), "modify ERR again");
	if (!poll_one(p.req_rcq, &wc, 3))
		verdict(1, "no completion in 3 s, nor after another modify to ERR");
	verdict(1, "no completion in 3 s; after another modify to ERR: %s",
		ibv_wc_status_str(wc.status));
}
