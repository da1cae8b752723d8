/* A misaligned atomic is refused by ibv_post_send (EINVAL) instead of reaching the responder,
 * which would NAK it as an invalid request. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct pair p;
	struct ibv_sge s;
	struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .send_flags = IBV_SEND_SIGNALED, .num_sge = 1 }, *bad;
	struct ibv_wc wc;
	int rc;

	repro_name = "atomic-misaligned-post";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	p = connect_pair(&d, pd, pd);
	s = sge_of(mr, 0, 8);
	wr.sg_list = &s;
	wr.wr.atomic.remote_addr = (uintptr_t)mr->addr + 8192 + 4;
	wr.wr.atomic.rkey = mr->rkey;
	wr.wr.atomic.compare_add = 1;
	rc = ibv_post_send(p.req, &wr, &bad);
	if (rc == EINVAL)
		verdict(1, "ibv_post_send: EINVAL");
	if (rc)
		die("ibv_post_send: %s", strerror(rc));
	if (!poll_one(p.req_cq, &wc, 10))
		die("no completion");
	verdict(0, "completed with %s", ibv_wc_status_str(wc.status));
}
